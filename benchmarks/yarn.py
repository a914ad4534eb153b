"""B21: the same maintenance jobs with Spark on YARN vs `local[2]`.

B14's rounds (`benchmarks.cluster`: four small tables, a worker plans a compaction, a
Z-order, a TTL and a clean, one real scheduler process runs them one at a time), twice:
first on `local[2]`, then with `LAKEWARDEN_SPARK_MASTER=yarn` against a ResourceManager
and one NodeManager started on this machine from Hadoop's own jars
(`lakewarden.spark.local_yarn`): the scheduler's warm session is then a YARN application
in client mode (its driver in the scheduler, an ApplicationMaster and one executor of 2
cores in containers). The first round of each warms its session and is left out. Per job:
`job_runs.duration_ms`.

On one 2-core machine YARN can only cost: the ResourceManager, the NodeManager, the
ApplicationMaster and the executor are four JVMs sharing the cores local[2] has to
itself, and every task crosses a socket. What it proves is that the same jobs run
unchanged on YARN, and what that costs here. (Submitted applications on YARN, client and
cluster mode, are tests/integration/test_yarn_spark.py's: a cold application per job
measures YARN's container start, not the job.)
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.cluster import _clear, _mode, _report, local_rounds
from benchmarks.harness import Context, Figure, measuring
from lakewarden.spark.local_cluster import spark_home
from lakewarden.spark.local_yarn import start_yarn


def b21(ctx: Context) -> Figure:
    with measuring(
        "B21",
        "maintenance jobs (compaction, zorder, ttl, clean) with Spark on YARN",
        "the same jobs on local[2]",
        "both pass; timings reported",
    ) as fig:
        rt = ctx.rt
        rounds = 2 if ctx.sizes.name == "smoke" else ctx.repeats + 1
        _clear(rt)
        local = local_rounds(ctx, rounds)
        started = time.perf_counter()
        with start_yarn(ctx.work_dir / "b21-yarn", rt.settings) as cluster:
            start_s = time.perf_counter() - started
            on_yarn: dict[str, Any] = {
                "spark_conf": {
                    **rt.settings.spark_conf,
                    # PySpark's jars are on this node already: nothing zipped and uploaded.
                    "spark.yarn.jars": f"local:{spark_home() / 'jars'}/*",
                    "spark.executor.instances": "1",
                    "spark.executor.cores": "2",
                    "spark.executor.memory": "1g",
                    "spark.yarn.am.memory": "256m",
                },
                "yarn_resourcemanager_url": cluster.web_url,
            }
            remote = _mode(
                rt,
                ctx,
                "yarn",
                "yarn",
                None,
                rounds,
                settings_update=on_yarn,
                env_update=cluster.client_env(),
            )
            # Every job ran in the session's one YARN application, which YARN knows.
            apps = remote["apps"]
            on_cluster = bool(apps) and all(
                a.startswith("application_") and cluster.app(a) is not None for a in apps
            )
        _clear(rt)
        _report(fig, local, remote, start_s, on_cluster)
        fig.values["yarn_start_s"] = fig.values.pop("cluster_start_s")
        fig.values["apps_listed_by_resourcemanager"] = fig.values.pop("apps_listed_by_master")
        fig.ratio_label = fig.ratio_label.replace("cluster/local", "yarn/local")
    return fig
