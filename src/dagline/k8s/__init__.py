"""dagline on Kubernetes: the custom resources, the kopf controller and the spark-operator executor.

The only package that imports `kopf` or `kubernetes`. Everything here is a thin layer over the core:
handlers validate, call the same functions the CLI calls, and write back status derived from the
database, so any number of replicas writing it agree.
"""
