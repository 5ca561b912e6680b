"""Tools the test set-up runs: fetching pinned binaries the tests need (see fetch_k8s_tools.py)."""
