# lakewarden: one image for every role (migrate | api | worker | scheduler | demo).
#
#   docker build -t lakewarden:0.1.0 .
#   docker run --rm -e LAKEWARDEN_DATABASE_URL=... lakewarden:0.1.0 migrate
#   docker run --rm -p 8080:8080 -e LAKEWARDEN_DATABASE_URL=... lakewarden:0.1.0   # api
#
# The scheduler runs PySpark in-process, so the image carries a Java 17 JRE and
# Debian's PostgreSQL JDBC driver (/usr/share/java/postgresql.jar) for the
# Iceberg JDBC catalog.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

# openjdk's postinst writes man-page alternatives; slim images drop /usr/share/man.
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless \
        libpostgresql-jdbc-java \
        procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Copy only what the build and `lakewarden migrate` need (alembic.ini and
# migrations/ stay in the working directory), never a local .venv or .git.
# README* may be absent: the wildcard then matches nothing.
COPY pyproject.toml README* alembic.ini ./
COPY lakewarden/ lakewarden/
COPY services/ services/
COPY migrations/ migrations/

RUN pip install --no-cache-dir . \
    && rm -rf build ./*.egg-info

# Non-root runtime user. /warehouse is created here, owned by that user, so a
# fresh named volume mounted on it inherits the ownership.
RUN groupadd --system --gid 10001 lakewarden \
    && useradd --system --uid 10001 --gid lakewarden --create-home \
        --home-dir /home/lakewarden --shell /usr/sbin/nologin lakewarden \
    && mkdir -p /warehouse /var/lib/lakewarden \
    && chown lakewarden:lakewarden /warehouse /var/lib/lakewarden

ENV LAKEWARDEN_DATA_DIR=/var/lib/lakewarden \
    LAKEWARDEN_API_HOST=0.0.0.0 \
    LAKEWARDEN_API_PORT=8080

USER 10001:10001

# api; 4040 is the scheduler's optional Spark UI.
EXPOSE 8080 4040

ENTRYPOINT ["lakewarden"]
CMD ["api"]
