# One image for the three services and the worker entry point.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY services ./services
RUN pip install --no-cache-dir .
RUN useradd --create-home --uid 10001 worker
USER 10001
# agentihooks-controller | agentihooks-checkpoint-store | agentihooks-restorer serve
CMD ["agentihooks-controller"]
