# The `ostinato` CLI and server. docker-compose.yml runs it as `ostinato cluster init` and `ostinato server`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY . .
RUN pip install --no-cache-dir . \
    && useradd --create-home --uid 10001 ostinato

USER ostinato
WORKDIR /home/ostinato
EXPOSE 7243
ENTRYPOINT ["ostinato"]
CMD ["--help"]
