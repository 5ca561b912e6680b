"""Where a task's application file may be (ADR 64), checked when a DAG is applied: a DAG author names the
job dagline runs, never an arbitrary file of the machine that runs it.

- Applied from a file (`dagline dags apply`): a local `mainApplicationFile` (a relative or absolute path,
  or a `file://` / `local://` URI) must resolve, symlinks included, inside the DAG file's folder or a
  jobs folder of `DAGLINE_JOBS_FOLDER` (several separated by `:`). It need not exist yet.
- On Kubernetes (a DAG object): only `local://` (a path in the Spark image), `s3a://`, `gs://`,
  `abfss://`, `hdfs://` and `https://` URIs; a bare path would be read on the driver pod from wherever.
- Either way, any other scheme (`http://`, `ftp://`...) is refused.

A refusal is an `InvalidInput` naming the field (`spec.tasks[0].spark.mainApplicationFile`): exit 2,
an `Invalid` condition on the DAG object, nothing stored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from dagline.errors import InvalidInput

# URI schemes (spelt as one string each: "local" here is Spark's scheme, not the executor of that name)
REMOTE_SCHEMES = tuple("s3a gs abfss hdfs https".split())
FILE_SCHEMES = tuple("file local".split())  # a path on this machine (local: in the Spark image, on Kubernetes)
KUBERNETES_SCHEMES = (FILE_SCHEMES[1], *REMOTE_SCHEMES)
JOBS_FOLDER_VARIABLE = "DAGLINE_JOBS_FOLDER"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def jobs_folders(environ: Mapping[str, str] | None = None) -> list[str]:
    """The configured jobs folders (`DAGLINE_JOBS_FOLDER`, `:`-separated; empty parts ignored)."""
    raw = (os.environ if environ is None else environ).get(JOBS_FOLDER_VARIABLE, "")
    return [part for part in raw.split(os.pathsep) if part.strip()]


def check_application_files(dag, *, dag_folder: str | None, jobs: Sequence[str] = (),
                            source: str | None = None) -> None:
    """Refuse a DAG whose tasks' application files are outside their home. `dag_folder`: the folder of the
    DAG file (None: a Kubernetes object, URIs only)."""
    for index, task in enumerate(dag.spec.tasks):
        value = task.spark.main_application_file
        field = f"spec.tasks[{index}].spark.mainApplicationFile"
        problem = (_kubernetes_problem(value) if dag_folder is None else
                   _local_problem(value, dag_folder, jobs))
        if problem:
            raise InvalidInput(f"task {task.id}: {problem}", field=field, source=source)


def _kubernetes_problem(value: str) -> str | None:
    match = _SCHEME.match(value)
    if match and match.group(1).lower() in KUBERNETES_SCHEMES and value[match.end():].startswith("//"):
        return None
    allowed = ", ".join(f"{s}://" for s in KUBERNETES_SCHEMES)
    return (f"{value!r} is not a URI the driver can read: on Kubernetes it must be one of {allowed} "
            f"(e.g. local:///opt/jobs/{os.path.basename(value) or 'job.py'} for a file in the Spark image)")


def _local_problem(value: str, dag_folder: str, jobs: Sequence[str]) -> str | None:
    match = _SCHEME.match(value)
    path = value
    if match:
        scheme = match.group(1).lower()
        if scheme in REMOTE_SCHEMES and value[match.end():].startswith("//"):
            return None
        if scheme not in FILE_SCHEMES or not value[match.end():].startswith("//"):
            allowed = ", ".join(f"{s}://" for s in (*FILE_SCHEMES, *REMOTE_SCHEMES))
            return f"{value!r}: a path, or a URI of {allowed}"
        path = value[match.end() + 2:]
        if not path.startswith("/"):
            return f"{value!r}: a {scheme}:// URI names an absolute path ({scheme}:///path/to/job.py)"
    if "\x00" in path:
        return "a path cannot hold a NUL character"
    resolved = os.path.realpath(os.path.join(dag_folder, path))
    homes = [os.path.realpath(dag_folder), *(os.path.realpath(folder) for folder in jobs)]
    if any(_inside(resolved, home) for home in homes):
        return None
    where = "the DAG file's folder" + (f" or a jobs folder ({', '.join(jobs)})" if jobs else
                                       f" (or a jobs folder: set {JOBS_FOLDER_VARIABLE})")
    return f"{value!r} resolves to {resolved}, outside {where}"


def _inside(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:
        return False
