"""Prometheus for e2e tests: where it is, and its HTTP API.

Import from e2e tests as ``from prometheus_api import prometheus_url, query, wait_for_series`` (tests/e2e is on
sys.path through its conftest.py). Call ``prometheus_url()`` after the ``kubeconfig`` fixture has run.

- The local cluster (KUBECONFIG unset, or pointing at the local cluster's ``<state dir>/kubeconfig``):
  ``prometheus_url`` starts Prometheus and prometheus-operator on it if they do not run yet
  (``e2e/cluster/monitoring.sh up``: idempotent; ~1 s when up, under a minute when the binaries and images are
  cached) and returns the base URL of its HTTP API, a NodePort on a real node's address that this host reaches
  directly. ``make cluster-down`` stops it with the cluster.
- Any other cluster (KUBECONFIG set elsewhere, e.g. kind): the URL is ``RLPLACE_PROMETHEUS_URL``, and the test is
  skipped when that is unset. That Prometheus must select the ServiceMonitors, PodMonitors and PrometheusRules of
  every namespace, as the local one does.

The local Prometheus scrapes and evaluates every 5 s, so a new target's first sample or a rule's first
evaluation takes up to ~5 s after Prometheus has loaded the object (prometheus-operator rewrites its config and
the config reloader reloads it: allow ~30 s after creating a ServiceMonitor, PodMonitor or PrometheusRule).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from e2e_cluster import e2e_dir, run_script

#: The environment variable naming the Prometheus of a cluster that is not the local one.
URL_ENV = "RLPLACE_PROMETHEUS_URL"


def _local_cluster(state_dir: Path) -> bool:
    given = os.environ.get("KUBECONFIG")
    return not given or Path(given).resolve() == (state_dir / "kubeconfig").resolve()


def prometheus_url(state_dir: Path | None = None, *, timeout: float = 900) -> str:
    """Base URL (``http://host:port``, no trailing slash) of the cluster's Prometheus; skips when there is none.

    On the local cluster in ``state_dir`` (default: the ``RLPLACE_E2E_DIR`` one) it runs
    ``monitoring.sh up`` first (a cold first run builds Prometheus and prometheus-operator: minutes).
    """
    state_dir = state_dir or e2e_dir()
    if not _local_cluster(state_dir):
        url = os.environ.get(URL_ENV)
        if not url:
            pytest.skip(f"no Prometheus for this cluster: set {URL_ENV} (KUBECONFIG is not the local cluster's)")
        return url.rstrip("/")
    out = run_script("monitoring", "up", env={"RLPLACE_E2E_DIR": str(state_dir)}, timeout=timeout)
    if out.returncode != 0:
        tail = "\n".join(out.stdout.splitlines()[-40:])
        pytest.fail(f"e2e/cluster/monitoring.sh up failed:\n{tail}", pytrace=False)
    return out.stdout.strip().splitlines()[-1].rstrip("/")


def api_get(url: str, path: str, params: dict[str, str] | None = None, timeout: float = 10) -> Any:
    """GET ``url + path`` of Prometheus' HTTP API; the ``data`` of a ``status: success`` answer."""
    full = f"{url}{path}"
    if params:
        full += "?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(full, timeout=timeout) as response:
            body = json.load(response)
    except urllib.error.HTTPError as error:  # 400/422: a bad query; the body says why
        body = json.loads(error.read() or b"{}")
        raise RuntimeError(f"GET {full}: HTTP {error.code}: {body.get('error', body)}") from None
    if body.get("status") != "success":
        raise RuntimeError(f"GET {full}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]


def query(url: str, promql: str) -> list[dict[str, Any]]:
    """An instant query: the result's series, each ``{"metric": {labels}, "value": [time, "value"]}``.

    A scalar or string result comes back as one entry with empty ``metric``.
    """
    data = api_get(url, "/api/v1/query", {"query": promql})
    if data["resultType"] in ("scalar", "string"):
        return [{"metric": {}, "value": data["result"]}]
    return data["result"]


def wait_for_series(url: str, promql: str, timeout: float = 60, interval: float = 1) -> list[dict[str, Any]]:
    """Repeat the instant query until it returns at least one series, and return them; TimeoutError if not."""
    deadline = time.monotonic() + timeout
    while True:
        series = query(url, promql)
        if series:
            return series
        if time.monotonic() > deadline:
            raise TimeoutError(f"no series for {promql!r} at {url} after {timeout:g} s")
        time.sleep(interval)


# The brief's name for it.
wait_for = wait_for_series


def rules(url: str, kind: str | None = None) -> list[dict[str, Any]]:
    """Every rule Prometheus has loaded (``/api/v1/rules``), flattened over its groups; ``kind``: "alert" or
    "record" to get only those. Each rule carries its group's ``file`` and ``name`` as ``group_file`` and
    ``group``."""
    params = {"type": kind} if kind else None
    out = []
    for group in api_get(url, "/api/v1/rules", params)["groups"]:
        for rule in group["rules"]:
            out.append({**rule, "group": group["name"], "group_file": group["file"]})
    return out


def alerts(url: str, state: str | None = None) -> list[dict[str, Any]]:
    """The active alerts (``/api/v1/alerts``): each with ``labels``, ``annotations``, ``state`` ("pending" or
    "firing"), ``activeAt``, ``value``; only those in ``state`` if given."""
    found = api_get(url, "/api/v1/alerts")["alerts"]
    return [a for a in found if state is None or a["state"] == state]


def targets(url: str, state: str = "active") -> list[dict[str, Any]]:
    """The scrape targets (``/api/v1/targets``): each with ``labels``, ``scrapePool``, ``health``, ``lastError``."""
    return api_get(url, "/api/v1/targets", {"state": state})[f"{state}Targets"]
