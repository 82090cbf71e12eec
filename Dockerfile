# The `ostinato` CLI and server. docker-compose.yml runs it as `ostinato cluster init` and `ostinato server`.
# A first stage with a C compiler builds the wheel, so the image has the Avro writers' C engine (schemas/
# native_writer.py; without one the install falls back to the generated Python writers, slower).
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --create-home --uid 10001 ostinato

USER ostinato
WORKDIR /home/ostinato
EXPOSE 7243
ENTRYPOINT ["ostinato"]
CMD ["--help"]
