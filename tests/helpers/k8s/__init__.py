"""The Kubernetes stand-ins of the tests: an API server emulator, kopf in a thread, a spark-operator, an
operator replica. The fixtures that start them (`kube`, `run_kopf`, `spark_operator`) are in
tests/k8s/conftest.py; tests/k8s/README.md describes them."""
