"""Kubernetes test infrastructure: an API server emulator, kopf in a thread, a spark-operator stand-in."""
