"""Where `pimc sweep` runs its points: the local process pool, a running Dask scheduler, or a
Dask cluster on a batch system (dask-jobqueue), all behind `concurrent.futures.Executor`.

`--scheduler tcp://HOST:PORT` connects to a running scheduler; `--cluster FILE` starts a
dask-jobqueue cluster from a YAML (or JSON) file:

    jobqueue: slurm          # slurm, pbs, sge, lsf, htcondor, moab or oar
    jobs: 8                  # how many batch jobs to start (cluster.scale(jobs=...))
    options:                 # passed as they are to the jobqueue cluster class
      cores: 4
      memory: 16GB
      walltime: "01:00:00"

The Dask packages are the optional extra `pimdsl[cluster]`; the local pool needs nothing.
"""
from __future__ import annotations

import contextlib
import os
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path
from ..ir.errors import PimdslError

JOBQUEUE_CLASSES = {"slurm": "SLURMCluster", "pbs": "PBSCluster", "sge": "SGECluster", "lsf": "LSFCluster",
                    "htcondor": "HTCondorCluster", "moab": "MoabCluster", "oar": "OARCluster"}


CONNECT_TIMEOUT_S = 20                            # a scheduler that does not answer by then is unreachable


class ClusterError(PimdslError):
    """A cluster that cannot be reached or configured: the message says what to do."""


def _dask():
    try:
        import distributed
    except ImportError:
        raise ClusterError("a Dask cluster needs the optional packages: pip install 'pimdsl[cluster]'") from None
    return distributed


def read_cluster_config(path: str) -> tuple[str, int, dict]:
    """(jobqueue class name, number of jobs, the class's options) from a cluster file."""
    import yaml                                   # comes with dask
    try:
        config = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ClusterError(f"cannot read cluster file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ClusterError(f"{path}: not YAML or JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ClusterError(f"{path}: expected a mapping with 'jobqueue', 'jobs' and 'options'")
    kind = str(config.get("jobqueue", "")).lower()
    if kind not in JOBQUEUE_CLASSES:
        raise ClusterError(f"{path}: 'jobqueue' must be one of {', '.join(JOBQUEUE_CLASSES)} (got {kind or 'nothing'})")
    jobs = config.get("jobs", 1)
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ClusterError(f"{path}: 'jobs' must be a positive integer (got {jobs!r})")
    options = config.get("options") or {}
    if not isinstance(options, dict):
        raise ClusterError(f"{path}: 'options' must be a mapping of {JOBQUEUE_CLASSES[kind]} arguments")
    return JOBQUEUE_CLASSES[kind], jobs, options


class _DaskExecutor(Executor):
    """A Dask client's executor whose tasks are never deduplicated (pure=False): each point runs."""

    def __init__(self, client):
        self._executor = client.get_executor(pure=False)

    def submit(self, fn, /, *args, **kwargs):
        return self._executor.submit(fn, *args, **kwargs)

    def shutdown(self, wait=True, *, cancel_futures=False):
        self._executor.shutdown(wait=wait)


PR_SET_PDEATHSIG = 1                              # prctl(2)


def die_with_parent(parent: int) -> None:
    """A pool worker's first act: ask Linux to kill it when the sweep that started it dies, even by
    SIGKILL (which gives the sweep no chance to stop its pool). Elsewhere nothing is asked."""
    try:
        import ctypes
        import signal
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:                    # the sweep died before the request took effect
        os._exit(1)


@contextlib.contextmanager
def open_executor(jobs: int, scheduler: str | None = None, cluster_file: str | None = None):
    """The executor for a sweep; closes what it opened."""
    if scheduler is None and cluster_file is None:
        with ProcessPoolExecutor(max_workers=jobs, initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
            yield pool
        return
    distributed = _dask()
    with contextlib.ExitStack() as stack:
        if cluster_file is not None:
            class_name, n_jobs, options = read_cluster_config(cluster_file)
            try:
                import dask_jobqueue
            except ImportError:
                raise ClusterError("a batch-system cluster needs dask-jobqueue: pip install 'pimdsl[cluster]'") from None
            try:
                cluster = stack.enter_context(getattr(dask_jobqueue, class_name)(**options))
            except (TypeError, ValueError) as exc:
                raise ClusterError(f"{cluster_file}: {class_name} refused its options: {exc}") from None
            cluster.scale(jobs=n_jobs)
            address = cluster
        else:
            address = scheduler
        try:
            client = stack.enter_context(distributed.Client(address, timeout=f"{CONNECT_TIMEOUT_S}s"))
        except (OSError, TimeoutError, ValueError) as exc:
            raise ClusterError(f"cannot reach the Dask scheduler at {scheduler or cluster_file}: {exc}") from None
        executor = _DaskExecutor(client)
        try:
            yield executor
        finally:
            executor.shutdown(wait=False)
