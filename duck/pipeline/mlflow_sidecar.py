"""MLflow's client in a process of its own, for ``logger=mlflow`` (:mod:`duck.pipeline.loggers`).

Why: importing MLflow's client costs 1.5-2 s (mlflow-skinny 3.17: ``import mlflow`` pulls in its tracing, genai
and data packages), 6-8 % of a 27-s job (docs/results.md, "Experiment loggers"). The job's process never imports
MLflow: a sidecar process does, started when the command line reads ``logger=mlflow`` (:func:`prestart`, before
the job imports torch), so its import runs on another core while the job starts; the job then sends it the
calls to make. One sidecar serves every job of the process (a sweep's jobs on the basic launcher import MLflow
once); it ends when the process does (its input closes).

Protocol: one JSON object per line each way. A request is ``{"op": NAME, "uri": TRACKING_URI, ...arguments}``,
the answer ``{"ok": RESULT}`` or ``{"error": MESSAGE}`` (an ``MlflowException``'s first line, or the type and
text of another error). The operations (:data:`OPS`) are the ``MlflowClient`` calls the loggers make:
``get_experiment`` (``{"id", "deleted"}`` or null), ``create_experiment``, ``create_run``, ``log_batch``
(metrics as ``[key, value, timestamp ms, step]``, params and tags as ``[key, value]``), ``log_artifact`` and
``set_terminated``. The sidecar prints nothing else on its output (what MLflow prints goes to its error stream,
which is the job's).

This module imports only the standard library (the command line imports it before torch).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from typing import Any


class SidecarError(Exception):
    """An operation the sidecar refused (the message is MLflow's), or a sidecar that stopped."""


class Sidecar:
    """The MLflow process of this process: :meth:`call` sends one request and waits for its answer."""

    def __init__(self) -> None:
        env = {**os.environ, "MLFLOW_ALLOW_FILE_STORE": os.environ.get("MLFLOW_ALLOW_FILE_STORE", "true")}
        self.proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, encoding="utf-8", bufsize=1, env=env)
        self._lock = threading.Lock()
        self.used = False

    def call(self, op: str, uri: str, **kwargs: Any) -> Any:
        """The result of operation ``op`` on the tracking store ``uri``; :class:`SidecarError` with MLflow's
        message where it refuses."""
        line = json.dumps({"op": op, "uri": uri, **kwargs}) + "\n"
        self.used = True
        with self._lock:
            try:
                assert self.proc.stdin is not None and self.proc.stdout is not None
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
                answer = self.proc.stdout.readline()
            except (BrokenPipeError, OSError) as e:
                raise SidecarError(f"the MLflow process stopped ({e})") from None
        if not answer:
            raise SidecarError(f"the MLflow process stopped (exit status {self.proc.wait()})")
        reply = json.loads(answer)
        if "error" in reply:
            raise SidecarError(reply["error"])
        return reply["ok"]

    def close(self) -> None:
        """End it: every call was answered (they are synchronous), so a sidecar never used (a job refused before
        it logged) is stopped at once rather than waited for while it imports MLflow; a used one ends when its
        input closes."""
        if self.proc.poll() is not None:
            return
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            if not self.used:
                self.proc.kill()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


_SIDECAR: Sidecar | None = None
_LOCK = threading.Lock()


def prestart() -> None:
    """Start this process's sidecar now, so that MLflow is imported while the job starts (idempotent)."""
    sidecar()


def sidecar() -> Sidecar:
    """This process's sidecar, started on first use (again if it stopped)."""
    global _SIDECAR
    with _LOCK:
        if _SIDECAR is None or _SIDECAR.proc.poll() is not None:
            _SIDECAR = Sidecar()
            atexit.register(_SIDECAR.close)
        return _SIDECAR


# ---------------------------------------------------------------------------------------- the sidecar side
def _get_experiment(client: Any, name: str) -> dict[str, Any] | None:
    found = client.get_experiment_by_name(name)
    if found is None:
        return None
    return {"id": str(found.experiment_id), "deleted": found.lifecycle_stage == "deleted"}


def _create_experiment(client: Any, name: str) -> str:
    return str(client.create_experiment(name))


def _create_run(client: Any, experiment_id: str, run_name: str, tags: dict[str, str]) -> str:
    return str(client.create_run(experiment_id, run_name=run_name, tags=tags).info.run_id)


def _log_batch(client: Any, run_id: str, metrics: list[list[Any]] = (), params: list[list[str]] = (),
               tags: list[list[str]] = ()) -> None:
    from mlflow.entities import Metric, Param, RunTag

    client.log_batch(run_id, metrics=[Metric(k, float(v), int(ts), int(step)) for k, v, ts, step in metrics],
                     params=[Param(k, v) for k, v in params], tags=[RunTag(k, v) for k, v in tags])


def _log_artifact(client: Any, run_id: str, path: str, artifact_path: str | None) -> None:
    client.log_artifact(run_id, path, artifact_path=artifact_path)


def _set_terminated(client: Any, run_id: str, status: str) -> None:
    client.set_terminated(run_id, status)


#: the operations a request may name
OPS = {"get_experiment": _get_experiment, "create_experiment": _create_experiment, "create_run": _create_run,
       "log_batch": _log_batch, "log_artifact": _log_artifact, "set_terminated": _set_terminated}


def serve(requests: Any, answers: Any) -> None:
    """Answer each request line of ``requests`` on ``answers`` (one client per tracking store)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    clients: dict[str, Any] = {}
    for line in requests:
        try:
            req = json.loads(line)
            op, uri = req.pop("op"), req.pop("uri")
            if uri not in clients:
                clients[uri] = MlflowClient(tracking_uri=uri)
            reply = {"ok": OPS[op](clients[uri], **req)}
        except MlflowException as e:
            reply = {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
        except Exception as e:  # an answer, not a dead sidecar: the job reports it
            reply = {"error": f"{type(e).__name__}: {e}"}
        answers.write(json.dumps(reply) + "\n")
        answers.flush()


def main() -> None:
    """The sidecar process: the protocol on a copy of the output stream, anything printed to the error stream."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout = sys.stderr
    try:
        import mlflow.tracking  # noqa: F401  (the import this process exists for, before the first request)
    except ImportError as e:
        for _ in sys.stdin:
            answers.write(json.dumps({"error": f"mlflow is not importable: {e}"}) + "\n")
            answers.flush()
        return
    serve(sys.stdin, answers)


if __name__ == "__main__":
    main()
