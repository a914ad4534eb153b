"""Jobs of application-mode pools: each its own Spark application (`spark-submit`), launched,
watched, killed and judged by the leader, and re-attached by the next leader after a failover.

Why: big rewrites should not share a driver with hundreds of small ones, and the leader's
own capacity (one JVM) stops being the limit: an application's driver is its own process
(client mode) or pod (Kubernetes cluster mode). `pool_modes` says which pools run this way.

The application records its own outcome (`lakewarden.jobs.application_entry`, fenced by the run's
current assignment). The leader steps in only when it ends without doing so: then the
table's commits decide (`find_commit`): a commit by this task means succeeded, never a
second run; none means the attempt failed (retried as any failure is).

Status, by master: `local[...]` and standalone client mode: the spark-submit process (the
driver runs in it) while this leader launched it; after a failover, that process by pid on
the same host, or the run's heartbeat (the application writes it). Standalone: also the
master's JSON API. Kubernetes: `spark-submit --status/--kill <namespace>:<driver pod>`.
YARN (client and cluster mode): the ResourceManager's REST API (`lakewarden.spark.yarn`),
the application found by its id (`spark_app_id`, which the driver records) or its name
(the job group), its end told with YARN's diagnostics; spark-submit's exit too while this
leader launched it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import load_table
from lakewarden.db.models import JobRun, ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.formats.delta import catalog as delta_catalog
from lakewarden.formats.hudi.catalog import open_timeline
from lakewarden.jobs import application_entry as entry
from lakewarden.jobs.delta import recovered_metrics
from lakewarden.jobs.execute import (
    GROUP,
    OWN_FAMILY_FORMATS,
    Job,
    finish_if_committed,
    job_group,
)
from lakewarden.kinds import hudi_compaction
from lakewarden.leader import Fence, FencedOut, check_fence
from lakewarden.logs import log_context
from lakewarden.redact import secrets_of
from lakewarden.runtime import Runtime
from lakewarden.settings import Settings
from lakewarden.spark import yarn
from lakewarden.spark.commits import find_commit
from lakewarden.spark.local_cluster import app_state, kill_app
from lakewarden.spark.submit import (
    application_master,
    application_settings,
    is_kubernetes,
    is_local,
    is_yarn,
    kubernetes_argv,
    masked,
    properties_text,
    settings_env,
    spark_submit_path,
    submit_argv,
)
from lakewarden.states import RunMode, RunState, TaskState
from lakewarden.tables import ref_of
from lakewarden.tasks import repo
from lakewarden.tasks.runs import LOG_TAIL_CHARS, finish_run
from services.scheduler.family_hosts import NEVER_STARTED, FamilyHost, FamilyHosts

log = logging.getLogger(__name__)

# A run's deploy_mode when a warm family host runs it (services.scheduler.family_hosts).
WARM_HOST = "warm-host"
KILL_GRACE_S = 10.0  # SIGTERM, then SIGKILL this much later
CLUSTER_STATUS_EVERY_S = 10.0  # a Kubernetes --status spawns a JVM: not every loop
SETTINGS_SWEEP_EVERY_S = 10.0  # how often a scheduler looks for settings files left over


def mode_of(settings: Settings, pool: str, table_format: str = "iceberg") -> RunMode:
    """How a job runs: its pool's mode (`pool_modes`); a Hudi or Delta table's job always as
    an application (a JVM of its format's family: the warm session is Iceberg's)."""
    if table_format in OWN_FAMILY_FORMATS:
        return RunMode.APPLICATION
    return settings.pool_modes.get(pool, RunMode.SESSION)


class ApplicationEnded(RuntimeError):
    """The application ended without recording its outcome (its output's tail is the
    run's log tail)."""


@dataclass
class Application:
    """A submitted application this leader watches."""

    task_id: int
    attempt: int
    group: str
    master: str
    submission_id: str | None
    timeout_s: float
    deadline: float  # monotonic
    process: subprocess.Popen[bytes] | None = None  # None: launched by an earlier leader
    log_path: Path | None = None
    killed: str | None = None  # why we killed it
    killed_at: float = 0.0
    state_checked_at: float = 0.0
    cluster_state: str | None = None  # the cluster's last word (RUNNING, FINISHED, ...)
    # On a warm family host (services.scheduler.family_hosts): its host and its job (to
    # launch it as its own application if the host never started it).
    host: FamilyHost | None = None
    job: Job | None = None


class Applications:
    """The leader's submitted applications: launch, poll each loop, kill, judge, adopt."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.running: dict[int, Application] = {}
        self.lock = threading.Lock()  # the main loop polls, the reaper adopts
        self.log_dir = rt.settings.data_dir / "applications"
        self.hosts = FamilyHosts(rt, self.log_dir)  # warm_families' hosts
        self.settings_swept_at = -math.inf

    def task_ids(self) -> set[int]:
        with self.lock:
            return set(self.running)

    def room(self) -> int:
        """How many more applications may run now (max_concurrent_applications)."""
        return max(0, self.rt.settings.max_concurrent_applications - len(self.running))

    # --- launch -------------------------------------------------------------------
    def launch(self, fence: Fence, job: Job, timeout_s: float) -> None:
        """spark-submit the job (its own process group: it outlives this leader, so the next
        one can re-attach it) and store its submission at once."""
        s = self.rt.settings
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if job.family in s.warm_families:
            host = self.hosts.take(job)
            if host is not None:
                self._on_host(job, host, timeout_s)
                return
            why = self.hosts.serves(job.family) or "it could not take it"
            note = f"task {job.task_id}: not on a warm host ({why}): its own application"
            log.warning("%s", note)
            with open(self.log_dir / f"{job.group}.log", "a") as out:
                out.write(note + "\n")  # the run's log tail says so too
        properties_file = self.log_dir / f"{job.group}.properties"
        try:
            sub = submit_argv(
                s,
                self.rt.db_url,
                spark_submit=spark_submit_path(),
                entry=str(Path(entry.__file__).resolve()),
                python=sys.executable,
                task_id=job.task_id,
                attempt=job.attempt,
                group=job.group,
                family=job.family,
                properties_file=str(properties_file),
            )
        except ValueError as exc:  # misconfigured: no attempt can succeed
            finish_run(self.rt, fence, job.task_id, job.attempt, error=exc, retryable=False)
            return
        if is_yarn(sub.master):
            try:
                yarn.check_ready(s.yarn_resourcemanager_url or "")
            except yarn.ResourceManagerUnreachable as exc:  # retried as any failure is
                finish_run(self.rt, fence, job.task_id, job.attempt, error=exc)
                return
        if sub.properties:
            write_private(properties_file, properties_text(sub.properties, spark_defaults()))
        log_path = self.log_dir / f"{job.group}.log"
        log.info("task %d: submitting %s", job.task_id, " ".join(masked(sub.argv, self._secrets())))
        try:
            with open(log_path, "ab") as out:
                process = subprocess.Popen(
                    sub.argv,
                    env={**os.environ, **settings_env(application_settings(s), self.rt.db_url)},
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as exc:
            finish_run(self.rt, fence, job.task_id, job.attempt, error=exc)
            return
        submission_id = sub.submission_id or local_submission_id(process.pid)
        app = Application(
            job.task_id,
            job.attempt,
            job.group,
            sub.master,
            submission_id,
            timeout_s,
            time.monotonic() + timeout_s,
            process,
            log_path,
        )
        self._track(app, job, sub.deploy_mode)

    def _track(self, app: Application, job: Job, deploy_mode: str) -> None:
        """Watch `app` from now on, and record on its run where it runs."""
        with self.lock:
            self.running[job.task_id] = app
        with transaction(self.rt.engine) as session:
            session.execute(
                update(JobRun)
                .where(JobRun.task_id == job.task_id, JobRun.attempt == job.attempt)
                .values(
                    submission_id=app.submission_id,
                    master=app.master,
                    deploy_mode=deploy_mode,
                    # an application's run, also one first tried without Spark (dispatch)
                    mode=RunMode.APPLICATION,
                )
            )

    def _on_host(self, job: Job, host: FamilyHost, timeout_s: float) -> None:
        """The attempt queued on its family's warm host: watched as an application whose
        process is the host; its timeout runs from when the host starts it."""
        submission_id = local_submission_id(host.pid)
        app = Application(
            job.task_id,
            job.attempt,
            job.group,
            application_master(self.rt.settings),
            submission_id,
            timeout_s,
            math.inf,
            host.process,
            host.log_path,
            host=host,
            job=job,
        )
        self._track(app, job, WARM_HOST)
        log.info("task %d: queued on the warm %s host %d", job.task_id, host.family, host.pid)

    # --- adopt (after a failover) --------------------------------------------------
    def adopt(self, run: JobRun, timeout_s: float, elapsed_s: float) -> None:
        """Watch a live application an earlier leader launched (`reattach` moved it to us)."""
        app = Application(
            run.task_id,
            run.attempt,
            run.spark_job_group or job_group(run.task_id, run.attempt),
            run.master or "",
            run.submission_id,
            timeout_s,
            time.monotonic() + max(0.0, timeout_s - elapsed_s),
        )
        with self.lock:
            self.running.setdefault(run.task_id, app)

    # --- each loop -------------------------------------------------------------------
    def poll(self, fence: Fence | None) -> None:
        """Cancel, time out, and judge the applications that ended without reporting."""
        self.hosts.close_idle()
        if time.monotonic() - self.settings_swept_at >= SETTINGS_SWEEP_EVERY_S:
            self.settings_swept_at = time.monotonic()
            try:
                self.sweep_settings_files()
            except Exception:  # the applications are still watched; the next sweep retries
                log.exception("could not sweep the applications' settings files")
        if fence is None or not self.running:
            return
        with self.lock:
            apps = list(self.running.values())
        self._carry_epoch(fence, [a.task_id for a in apps])
        for app in apps:
            with log_context(task_id=app.task_id, attempt=app.attempt):
                try:
                    self._poll_one(fence, app)
                except FencedOut as exc:
                    log.warning("task %d: %s", app.task_id, exc)
                except Exception:
                    log.exception("task %d: could not poll its application", app.task_id)

    def _carry_epoch(self, fence: Fence, task_ids: list[int]) -> None:
        """Our runs carry our current epoch (it changes if our own lease lapsed and we took
        it again), so their applications report under a live fence. (Their tasks' heartbeat
        is the scheduler's beat: `lakewarden.process.beat`.)"""
        with transaction(self.rt.engine) as s:
            check_fence(s, fence)
            s.execute(
                update(JobRun)
                .where(
                    JobRun.task_id.in_(task_ids),
                    JobRun.state == RunState.RUNNING,
                    JobRun.scheduler_id == fence.holder,
                    JobRun.leader_epoch != fence.epoch,
                )
                .values(leader_epoch=fence.epoch)
            )

    def _poll_one(self, fence: Fence, app: Application) -> None:
        # The process first, the rows second: an application that reported and exited is
        # then seen as reported, never as ended without a word.
        ended = self._ended(app)
        with transaction(self.rt.engine) as s:
            task_state = s.scalar(select(Task.state).where(Task.id == app.task_id))
            run_state, holder, stale = s.execute(
                select(
                    JobRun.state,
                    JobRun.scheduler_id,
                    func.coalesce(JobRun.heartbeat_at, JobRun.started_at)
                    < func.now() - func.make_interval(0, 0, 0, 0, 0, 0, self._stale_s()),
                ).where(JobRun.task_id == app.task_id, JobRun.attempt == app.attempt)
            ).one()
        if holder != fence.holder:
            self._forget(app)  # we lost leadership meanwhile: the new leader re-attached it
            return
        if run_state != RunState.RUNNING:
            if ended is not None or app.process is None:
                self._forget(app)  # it reported (or someone judged it): nothing to do
            return
        if ended is None and app.process is None and stale and app.cluster_state is None:
            ended = "its heartbeat stopped"
        if ended == NEVER_STARTED and app.job is not None:
            self._forget(app)  # it never ran: nothing to judge
            with open(self.log_dir / f"{app.group}.log", "a") as out:
                out.write(f"task {app.task_id}: {ended}\n")
            self.launch(fence, app.job, app.timeout_s)
            return
        if ended is not None:
            self._judge(fence, app, ended)
            return
        if task_state == TaskState.CANCELLED and app.killed is None:
            log.info("task %d cancelled: killing its application", app.task_id)
            self.kill(app, "cancelled")
        elif time.monotonic() > app.deadline and app.killed is None:
            log.warning(
                "task %d exceeded %.0fs: killing its application", app.task_id, app.timeout_s
            )
            self.kill(app, "timeout")
        elif app.killed and time.monotonic() - app.killed_at > KILL_GRACE_S:
            self.kill(app, app.killed, hard=True)

    def _stale_s(self) -> float:
        return self.rt.settings.stale_after_s

    def _ended(self, app: Application) -> str | None:
        """Why the application is over, or None while it (may) run."""
        if app.host is not None:
            started = app.host.seen(app.task_id, app.attempt).started_at
            if started is not None and app.deadline == math.inf:
                app.deadline = started + app.timeout_s  # its timeout runs from its start
            return app.host.ended(app.task_id, app.attempt)
        if is_kubernetes(app.master):
            return self._cluster_ended(app)
        if is_yarn(app.master):
            return self._yarn_ended(app)
        if app.process is not None:
            code = app.process.poll()
            return None if code is None else f"spark-submit exited with code {code}"
        pid = local_pid(app.submission_id)
        if pid is not None and not _alive(pid):
            return f"its process {pid} is gone"
        if app.master.startswith("spark://") and self.rt.settings.spark_master_web_url:
            return self._cluster_ended(app)
        return None  # judged by its heartbeat

    def _cluster_ended(self, app: Application) -> str | None:
        if time.monotonic() - app.state_checked_at < CLUSTER_STATUS_EVERY_S:
            return None
        app.state_checked_at = time.monotonic()
        state = cluster_state(self.rt, app)
        app.cluster_state = state
        if state in ("FINISHED", "FAILED", "KILLED", "SUCCEEDED", "ERROR", "UNKNOWN_GONE"):
            return f"the cluster says {state}"
        return None

    def _yarn_ended(self, app: Application) -> str | None:
        """spark-submit's exit (while we watch it) and the ResourceManager's word, asked
        every CLUSTER_STATUS_EVERY_S and at once when spark-submit exited (for YARN's
        diagnostics of why)."""
        exited = None
        if app.process is not None and (code := app.process.poll()) is not None:
            exited = f"spark-submit exited with code {code}"
        if exited is None and time.monotonic() - app.state_checked_at < CLUSTER_STATUS_EVERY_S:
            return None
        app.state_checked_at = time.monotonic()
        try:
            report = yarn_report(self.rt, app)
        except yarn.ResourceManagerUnreachable as exc:
            log.warning("task %d: %s", app.task_id, exc)
            return exited  # no word: its heartbeat still tells (cluster_state unchanged)
        app.cluster_state = None if report is None else str(report.get("state"))
        if report is not None:  # YARN has it: spark-submit read its settings file long ago
            self._drop_properties(app)
        word = yarn.ended(report)
        return f"{exited}; {word}" if exited and word else exited or word

    def _judge(self, fence: Fence, app: Application, why: str) -> None:
        """The application ended without recording its outcome: its commits decide."""
        state = judge_ended_run(
            self.rt,
            fence,
            app.task_id,
            app.attempt,
            why=f"application {app.group} ended without reporting ({why})"
            + (f" after it was killed ({app.killed})" if app.killed else ""),
            log_tail=_tail(app.log_path),
            timed_out=app.killed == "timeout",
            timeout_s=app.timeout_s,
        )
        log.info("task %d: %s: %s", app.task_id, why, state)
        self._forget(app)

    def _forget(self, app: Application) -> None:
        with self.lock:
            self.running.pop(app.task_id, None)
        if app.host is not None:
            app.host.forget(app.task_id, app.attempt)
        self._drop_properties(app)

    def _drop_properties(self, app: Application) -> None:
        """A YARN cluster-mode submission's settings file (its secrets), once read."""
        (self.log_dir / f"{app.group}.properties").unlink(missing_ok=True)

    def sweep_settings_files(self) -> None:
        """Every scheduler, leader or not, deletes the settings files (secrets) in its data
        directory whose run is no longer running. A leader drops its own as it watches its
        applications end, but one killed meanwhile cannot: the next leader re-attaches its
        live applications (on its own host) and may never see one that reported first."""
        files = {}
        for path in self.log_dir.glob("*.properties"):
            if match := GROUP.fullmatch(path.stem):
                files[(int(match[1]), int(match[2]))] = path
        if not files:
            return
        with transaction(self.rt.engine) as s:
            rows = s.execute(
                select(JobRun.task_id, JobRun.attempt).where(
                    JobRun.state == RunState.RUNNING,
                    JobRun.task_id.in_({task_id for task_id, _ in files}),
                )
            ).all()
        running = {(task_id, attempt) for task_id, attempt in rows}
        for run, path in files.items():
            if run not in running:
                log.info("deleting %s: its run is over", path.name)
                path.unlink(missing_ok=True)

    def _secrets(self) -> list[str]:
        return secrets_of(self.rt.settings, self.rt.db_url)

    # --- kill ------------------------------------------------------------------------
    def kill(self, app: Application, why: str, *, hard: bool = False) -> None:
        app.killed, app.killed_at = why, app.killed_at or time.monotonic()
        if app.host is not None:
            app.host.stop(app.task_id, app.attempt, app.group, hard=hard)
            return
        if is_kubernetes(app.master) and app.submission_id:
            argv = kubernetes_argv(spark_submit_path(), app.master, "kill", app.submission_id)
            subprocess.run(argv, capture_output=True, timeout=120, check=False)
            return
        if is_yarn(app.master):
            try:
                report = yarn_report(self.rt, app)
                if report is not None and yarn.ended(report) is None:
                    yarn.kill(self.rt.settings.yarn_resourcemanager_url or "", str(report["id"]))
            except yarn.ResourceManagerUnreachable as exc:
                log.warning("task %d: cannot kill its YARN application: %s", app.task_id, exc)
        if app.master.startswith("spark://") and self.rt.settings.spark_master_web_url:
            app_id = _app_id(self.rt, app)
            if app_id:
                kill_app(self.rt.settings.spark_master_web_url, app_id)
        pid = app.process.pid if app.process is not None else local_pid(app.submission_id)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL if hard else signal.SIGTERM)
        elif not is_local(app.master) and not is_yarn(app.master):
            log.warning("task %d: cannot kill %s from here", app.task_id, app.submission_id)

    def kill_all(self) -> None:
        """For tests and benchmarks: every application this leader watches, at once."""
        for app in list(self.running.values()):
            self.kill(app, "shutdown", hard=True)
        self.hosts.kill_all()


def judge_ended_run(
    rt: Runtime,
    fence: Fence,
    task_id: int,
    attempt: int,
    *,
    why: str,
    log_tail: str = "",
    timed_out: bool = False,
    timeout_s: float = 0.0,
) -> str:
    """A run whose application is over without its outcome recorded: a commit of this task
    in the table means it succeeded (never run again); none, it failed with `why`."""
    with transaction(rt.engine) as s:
        found = repo.task_with_table(s, task_id)
    if found is None:
        return "gone"
    task, row = found
    own = OWN_FINISH.get(row.format)
    if own is not None:
        recovered = own(rt, fence, task_id, attempt, row, judged=why)
    else:
        table = load_table(rt.catalogs.load(row.catalog), ref_of(row))
        recovered = finish_if_committed(rt, fence, task_id, attempt, task.kind, table, judged=why)
    if recovered is not None:
        return recovered
    error: BaseException = (
        TimeoutError(f"job exceeded its timeout of {timeout_s:.0f}s and was killed")
        if timed_out
        else ApplicationEnded(why)
    )
    return finish_run(rt, fence, task_id, attempt, error=error, spark_log=log_tail)


def hudi_finish_if_committed(
    rt: Runtime, fence: Fence, task_id: int, attempt: int, row: ManagedTable, **said: Any
) -> str | None:
    """A Hudi job's application ended without a word: the compaction instant its task's
    runs recorded, completed on the timeline, means it succeeded (never run again)."""
    with transaction(rt.engine) as s:
        planned = hudi_compaction.planned_by_task(s, task_id)
    if planned is None:
        return None
    timeline = open_timeline(rt.catalogs.entry(row.catalog), ref_of(row))
    if planned not in {i.requested for i in timeline.completed()}:
        return None
    metrics = {hudi_compaction.PLANNED: planned, "recovered": True, **said}
    return finish_run(rt, fence, task_id, attempt, metrics=metrics)


def delta_finish_if_committed(
    rt: Runtime, fence: Fence, task_id: int, attempt: int, row: ManagedTable, **said: Any
) -> str | None:
    """A Delta job's application ended without a word: a commit in the table's log marked
    with the task means it succeeded (never run again)."""
    timeline = delta_catalog.open_timeline(rt.catalogs.entry(row.catalog), ref_of(row))
    commit = timeline.find_job_commits(task_id)
    if commit is None:
        return None
    return finish_run(rt, fence, task_id, attempt, metrics=recovered_metrics(commit, **said))


# How a run of a format with its own Spark family is judged from its table when its
# application ended without a word (an Iceberg run: `finish_if_committed`).
OWN_FINISH = {"hudi": hudi_finish_if_committed, "delta": delta_finish_if_committed}


def reattach(rt: Runtime, fence: Fence, task_id: int, applications: Applications) -> str | None:
    """An application-mode run of a task an earlier leader held: re-attach it if its
    application is alive (fresh heartbeat, or its process here), finish it as succeeded if
    it committed, or None: re-plan it as any orphan."""
    stale_s = rt.settings.stale_after_s
    with transaction(rt.engine) as s:
        found = s.execute(
            select(
                JobRun,
                func.coalesce(JobRun.heartbeat_at, JobRun.started_at)
                > func.now() - func.make_interval(0, 0, 0, 0, 0, 0, stale_s),
                func.extract("epoch", func.now() - JobRun.started_at),
            ).where(
                JobRun.task_id == task_id,
                JobRun.state == RunState.RUNNING,
                JobRun.mode == RunMode.APPLICATION,
            )
        ).one_or_none()
        if found is None:
            return None
        run, fresh, elapsed = found
        s.expunge(run)
    pid = local_pid(run.submission_id)
    alive = _alive(pid) if pid is not None else bool(fresh)
    if run.master and is_yarn(run.master):
        alive = yarn_alive(rt, run, default=alive)
    if alive:
        try:
            with transaction(rt.engine) as s:
                take_over(
                    s,
                    rt,
                    fence,
                    task_id,
                    run.scheduler_id,
                    f"re-attached to its running application {run.submission_id} "
                    f"(leadership moved to epoch {fence.epoch})",
                )
                s.execute(
                    update(JobRun)
                    .where(JobRun.id == run.id, JobRun.state == RunState.RUNNING)
                    .values(scheduler_id=fence.holder, leader_epoch=fence.epoch)
                )
        except (repo.TransitionRejected, FencedOut) as exc:
            log.info("task %d not re-attached: %s", task_id, exc)
            return "rejected"
        applications.adopt(run, _timeout_s(rt, task_id), float(elapsed))
        log.info("task %d: re-attached to application %s", task_id, run.submission_id)
        return "reattached"
    # Dead. A commit says it succeeded (finished so, under our fence once it is ours);
    # without one the caller re-plans it from the table's real state.
    with transaction(rt.engine) as s:
        held = repo.task_with_table(s, task_id)
    if held is None:
        return None
    task, row = held
    if row.format in OWN_FAMILY_FORMATS:
        # re-planned: a Hudi retry executes the instant its run recorded; a Delta retry
        # finds the task's commit in the log first
        return None
    table = load_table(rt.catalogs.load(row.catalog), ref_of(row))
    if find_commit(table, task_id) is None:
        return None
    why = "its application is gone"
    try:
        with transaction(rt.engine) as s:
            take_over(s, rt, fence, task_id, run.scheduler_id, why)
    except (repo.TransitionRejected, FencedOut) as exc:
        log.info("task %d not taken over: %s", task_id, exc)
        return "rejected"
    recovered = finish_if_committed(rt, fence, task_id, run.attempt, task.kind, table, judged=why)
    assert recovered is not None  # the same table as read above: its commit is there
    return recovered


def take_over(
    s: Session, rt: Runtime, fence: Fence, task_id: int, from_holder: str, reason: str
) -> None:
    """Fenced: a running task an earlier leader held becomes ours, still running (the
    history records it as running -> running)."""
    repo.hand_over(
        s,
        task_id,
        TaskState.RUNNING,
        from_holder=from_holder,
        to_holder=fence.holder,
        actor=rt.process_id,
        reason=reason,
        fence=fence,
    )


def _timeout_s(rt: Runtime, task_id: int) -> float:
    with transaction(rt.engine) as s:
        found = repo.task_with_table(s, task_id)
        return 0.0 if found is None else Job.of(s, *found).timeout_s


# --- where an application runs --------------------------------------------------------------


def local_submission_id(pid: int) -> str:
    """A process on this host: its pid is also its process group (start_new_session)."""
    return f"pid:{socket.gethostname()}:{pid}"


def local_pid(submission_id: str | None) -> int | None:
    """The pid of a `pid:<host>:<pid>` submission, when that host is this one."""
    if not submission_id or not submission_id.startswith("pid:"):
        return None
    _, host, pid = submission_id.split(":", 2)
    return int(pid) if host == socket.gethostname() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _app_id(rt: Runtime, app: Application) -> str | None:
    with transaction(rt.engine) as s:
        return s.scalar(
            select(JobRun.spark_app_id).where(
                JobRun.task_id == app.task_id, JobRun.attempt == app.attempt
            )
        )


def yarn_report(rt: Runtime, app: Application) -> dict[str, Any] | None:
    """The ResourceManager's report of the application: by the id its driver recorded,
    else by its name (the job group; a driver that never started recorded none)."""
    web = rt.settings.yarn_resourcemanager_url
    if not web:
        return None
    app_id = _app_id(rt, app)
    if app_id and app_id.startswith("application_"):
        return yarn.app_report(web, app_id)
    return yarn.app_by_name(web, app.group)


def yarn_alive(rt: Runtime, run: JobRun, *, default: bool) -> bool:
    """After a failover: whether the run's YARN application still runs (the
    ResourceManager's word; `default`, the pid's or heartbeat's, when it has none)."""
    web = rt.settings.yarn_resourcemanager_url
    group = run.spark_job_group or job_group(run.task_id, run.attempt)
    try:
        if not web:
            return default
        if run.spark_app_id and run.spark_app_id.startswith("application_"):
            report = yarn.app_report(web, run.spark_app_id)
        else:
            report = yarn.app_by_name(web, group)
    except yarn.ResourceManagerUnreachable as exc:
        log.warning("task %d: %s", run.task_id, exc)
        return default
    return default if report is None else yarn.ended(report) is None


def cluster_state(rt: Runtime, app: Application) -> str | None:
    """The cluster's word on the application: a standalone master's JSON API, or
    Kubernetes' `spark-submit --status` (its driver pod's phase). None: no word yet."""
    if is_kubernetes(app.master) and app.submission_id:
        argv = kubernetes_argv(spark_submit_path(), app.master, "status", app.submission_id)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        return kubernetes_phase(done.stdout + done.stderr)
    web = rt.settings.spark_master_web_url
    app_id = _app_id(rt, app)
    if web and app_id:
        return app_state(web, app_id)
    return None


def kubernetes_phase(output: str) -> str | None:
    """The driver pod's phase in `spark-submit --status`'s output (`phase: Running`)."""
    for line in output.splitlines():
        key, _, value = line.strip().partition(":")
        if key.strip().lower() == "phase" and value.strip():
            phase = value.strip().upper()
            return {"SUCCEEDED": "FINISHED", "FAILED": "FAILED"}.get(phase, phase)
    if "not found" in output.lower():
        return "UNKNOWN_GONE"
    return None


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read (created so: never readable for a moment)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def spark_defaults() -> str:
    """$SPARK_CONF_DIR/spark-defaults.conf's text, or "" (a `--properties-file` replaces it)."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    path = Path(conf_dir) / "spark-defaults.conf" if conf_dir else None
    return path.read_text() if path is not None and path.is_file() else ""


def _tail(path: Path | None) -> str:
    """The end of an application's output (spark-submit's and its driver's, one file per
    submission: `Applications.launch`); `finish_run` keeps its last lines."""
    if path is None or not path.exists():
        return ""
    with open(path, "rb") as f:
        # Stack frames are dropped from the log tail: read more than it keeps.
        f.seek(max(0, path.stat().st_size - 8 * LOG_TAIL_CHARS))
        return f.read().decode(errors="replace")
