"""`python -m dagline.cli`: the same as the `dagline` console script."""

from dagline.cli import main

main()
