"""schemathesis against a live router: the served OpenAPI document is what the API does.

A bounded run (``EXAMPLES`` cases per operation, fixed seed) with every check
but ``positive_data_acceptance``: the schemas state shapes, and the config
validators add rules no JSON Schema states (reachable URLs, secret formats,
references between entities), answering those with the declared 422.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from tests.support.router import ADMIN_TOKEN, RouterProcess, base_config

EXAMPLES = 25
SEED = "20260"
ST = str(Path(sys.executable).with_name("st"))


@pytest.fixture
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    """A router per test: a schemathesis run may delete the tenants the next one needs."""
    tmp = tmp_path_factory.mktemp("contract")
    config = base_config(tmp / "data", 0)
    # schemathesis presents wrong credentials on purpose, many times a minute.
    config["admin"] = {**config["admin"], "max_auth_failures": 0}
    # Room for a batch of more than the 1000 events allowed: 400 from the route, not 413.
    config["server"]["max_body_bytes"] = 1024 * 1024
    with RouterProcess(tmp, config) as proc:
        yield proc


def schemathesis(
    location: str, base: str, token: str, *args: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """One ``st run``, in ``cwd``: it keeps a crash cache (``.schemathesis/``) there."""
    command = [
        ST, "run", location, "--url", base, "-H", f"Authorization: Bearer {token}",
        "--max-examples", str(EXAMPLES), "--seed", SEED, "--workers", "1",
        "--generation-database", "none", "--no-color", "--request-timeout", "10",
        *args,
    ]  # fmt: skip
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


def test_the_live_api_matches_its_document(router: RouterProcess, tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{router.port}"
    run = schemathesis(
        f"{base}/admin/v1/openapi.json",
        base,
        ADMIN_TOKEN,
        "--checks", "all", "--exclude-checks", "positive_data_acceptance",
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    _, _, body = router.request("GET", "/admin/v1/openapi.json")
    operations = sum(len(item) for item in orjson.loads(body)["paths"].values())
    counts = re.search(r"Selected: (\d+)/\d+\s+Tested: (\d+)", run.stdout)
    assert counts is not None, run.stdout[-3000:]
    selected, tested = int(counts[1]), int(counts[2])
    # Every operation ran (schemathesis's summary counts one fewer than the document).
    assert tested == selected >= operations - 1, run.stdout[-3000:]


def test_a_tenant_key_gets_declared_answers_only(router: RouterProcess, tmp_path: Path) -> None:
    """The same with a tenant's key: scoped 404s and its own data fit the document too."""
    # The first run's stateful phase may have deleted acme (it finds ids in list answers).
    router.admin("PUT", "/tenants/acme", {})
    status, created = router.admin("POST", "/tenants/acme/keys", {})
    assert status == 201
    base = f"http://127.0.0.1:{router.port}"
    run = schemathesis(
        f"{base}/admin/v1/openapi.json",
        base,
        created["key"],
        "--checks", "not_a_server_error,status_code_conformance,response_schema_conformance",
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]


def test_the_check_fails_on_a_broken_response_schema(router: RouterProcess, tmp_path: Path) -> None:
    """Declare a tenant's id an integer: schemathesis must catch the router answering a string."""
    status, _, body = router.request("GET", "/admin/v1/openapi.json")
    assert status == 200
    doc = orjson.loads(body)
    doc["components"]["schemas"]["Tenant"]["properties"]["id"] = {"type": "integer"}
    broken = tmp_path / "broken.json"
    broken.write_bytes(orjson.dumps(doc))
    base = f"http://127.0.0.1:{router.port}"
    run = schemathesis(
        str(broken),
        base,
        ADMIN_TOKEN,
        "--checks", "response_schema_conformance",
        "--include-path", "/admin/v1/tenants", "--include-method", "GET",
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode != 0
    assert "Response violates schema" in run.stdout, run.stdout[-4000:]
