"""Tests against Kubernetes: the operator and the spark-k8s executor on the API emulator (tests/helpers/k8s)."""
