"""The fresh-clone path in a real browser: the demo tables, `dagster dev` on them, the three assets with their
partitions, one partition materialized from the UI, and the figures on the run, asset and check pages.

Playwright drives Debian's `chromium` (`/usr/bin/chromium`, installed by `.ci/run`); no Playwright browser
download. What the pages must show is kept in the constants below, so a change of names or figures is one edit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from lakekeeper_dagster.demo.tables import create_demo_tables, database_location
from lakekeeper_dagster.surface.instance import install_instance_settings
from lakekeeper_dagster_tests.tables import REPO, data_files, rows_of
from spark_resources.metastore import free_port

try:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import Page, sync_playwright
except ImportError:  # the `test` extra installs it; the `browser` fixture says what is missing
    sync_playwright = None

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

DEMO_DB = "lakekeeper_demo"
DEMO_SCALE = 0.02  # the demo tables with 1/50 of their files and rows: 10, 3 x 4 and 9 x 2 files
LOCATION = "lakekeeper_dagster"
ASSETS = ("lakekeeper_events", "lakekeeper_events_2p", "lakekeeper_flat")
TABLE = "lakekeeper_events"
PARTITIONS = ("date=2024-01-01", "date=2024-01-02", "date=2024-01-03")
PARTITION = "date=2024-01-02"
# False while the partitions appear only once the observation job has run: the test runs it first.
JOB = f"Compact__{DEMO_DB}__{TABLE}"  # the table's compaction job, which the Materialize button launches
DEV_WARNING_FILTER = "ignore:Function `dev_command` is superseded:FutureWarning"  # as the Makefile's `ui` target
PARTITIONS_TIMEOUT = 240  # seconds for hive_partitions_sensor's first tick (the daemon's sensor loop) to add them
CHECK = "row_count_preserved"
CHECK_RESULT = "Passed"  # what the check page shows under "Evaluation result"
SERVER_TIMEOUT = 240  # seconds for `dagster dev` to serve the loaded code location (it starts a Spark session)
RUN_TIMEOUT = 300  # seconds for a run to finish (its worker starts its own Spark session)
UI_TIMEOUT_MS = 60_000  # a page element to appear
REQUIRE = "LAKEKEEPER_REQUIRE_BROWSER"  # =1 (CI): a missing chromium or playwright fails instead of skipping


def run_figures(files_before: int, files_after: int, rows: int) -> dict[str, str]:
    """What the run page and the asset page show for the compacted partition: metadata label -> value as shown."""
    return {
        "files_before": str(files_before),
        "files_after": str(files_after),
        "rows_before": str(rows),
        "rows_after": str(rows),
    }


def check_figures(rows: int) -> dict[str, str]:
    """What the check page shows at the top of the row-count check of that run: metadata label -> value as shown."""
    return {"rows_before": str(rows), "rows_after": str(rows)}


def asset_path(table: str) -> str:
    """The asset key as the UI's addresses write it: hive/<db>/<table>."""
    return f"hive/{DEMO_DB}/{table}"


def write_config(path: Path, metastore_uri: str) -> None:
    """The lakekeeper.yaml of the walkthrough: the demo database on the given metastore, Spark on one core."""
    config = {
        "tables": {"databases": [DEMO_DB]},
        "metastore": {"uri": metastore_uri},
        "spark_submit": {"master": "local[1]"},
    }
    path.write_text(yaml.safe_dump(config))


def graphql(url: str, query: str, variables: dict | None = None) -> dict:
    """One GraphQL request to the webserver; its `data`, or an AssertionError with the errors."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(f"{url}/graphql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.loads(response.read())
    assert not answer.get("errors"), answer["errors"]
    return answer["data"]


LOCATION_QUERY = """
{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
    locationOrLoadError { __typename ... on PythonError { message } } } } } }
"""

RUNS_QUERY = """
query($ids: [String!]) { runsOrError(filter: {runIds: $ids}) { ... on Runs { results { runId status } } } }
"""


def tail(path: Path, lines: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


@dataclass
class DagsterUI:
    """A running `dagster dev`: its URL, its log, and where the test keeps its screenshots."""

    url: str
    log: Path
    shots: Path

    def explain(self) -> str:
        """What to look at when an assertion fails."""
        return f"screenshots in {self.shots}; dagster dev log {self.log}:\n{tail(self.log)}"


def wait_until_loaded(ui: DagsterUI, process: subprocess.Popen) -> None:
    """Wait for the webserver to answer and the code location to load; fail with its error or the log."""
    deadline = time.monotonic() + SERVER_TIMEOUT
    while time.monotonic() < deadline:
        assert process.poll() is None, f"dagster dev exited ({process.returncode}); {ui.explain()}"
        try:
            entries = graphql(ui.url, LOCATION_QUERY)["workspaceOrError"]["locationEntries"]
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            entries = []
        for entry in entries:
            if entry["name"] == LOCATION and entry["loadStatus"] == "LOADED":
                loaded = entry["locationOrLoadError"]
                assert loaded["__typename"] == "RepositoryLocation", f"{loaded}; {ui.explain()}"
                return
        time.sleep(1)
    pytest.fail(f"the code location did not load in {SERVER_TIMEOUT}s; {ui.explain()}")


def stop(process: subprocess.Popen) -> None:
    """Interrupt `dagster dev` (it stops its daemon, webserver and code server); kill its process group if needed."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # run workers and Spark JVMs left behind
    process.wait()


@contextmanager
def dagster_dev(workdir: Path, metastore_uri: str) -> Iterator[DagsterUI]:
    """`dagster dev` in `workdir` on a free port: config, instance and workspace in temp dirs, as after set-up."""
    config = workdir / "lakekeeper.yaml"
    write_config(config, metastore_uri)
    home = workdir / "dagster_home"
    install_instance_settings(home)  # as `make ui` does
    shutil.copy(REPO / "workspace.yaml", workdir / "workspace.yaml")
    port = free_port()
    ui = DagsterUI(url=f"http://127.0.0.1:{port}", log=workdir / "dagster_dev.log", shots=workdir / "shots")
    ui.shots.mkdir()
    env = {**os.environ, "LAKEKEEPER_CONFIG": str(config), "DAGSTER_HOME": str(home), "PYTHONPATH": str(REPO)}
    env.pop("LAKEKEEPER_METASTORE_URI", None)  # the config file says where the metastore is
    command = [sys.executable, "-W", DEV_WARNING_FILTER, "-m", "dagster", "dev", "-w", "workspace.yaml"]
    command += ["-h", "127.0.0.1", "-p", str(port)]
    with ui.log.open("w") as log:
        process = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_until_loaded(ui, process)
        yield ui
    finally:
        stop(process)


def wait_for_run(ui: DagsterUI, run_id: str) -> str:
    """Poll the run's status until it ends; the final status."""
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        (run,) = graphql(ui.url, RUNS_QUERY, {"ids": [run_id]})["runsOrError"]["results"]
        if run["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
            return run["status"]
        time.sleep(2)
    pytest.fail(f"run {run_id} did not finish in {RUN_TIMEOUT}s; {ui.explain()}")


@pytest.fixture
def demo_ui(spark, metastore, tmp_path) -> Iterator[DagsterUI]:
    """The walkthrough's set-up on the test metastore: the demo tables (smaller), then `dagster dev` on them."""
    spark.sql(f"DROP DATABASE IF EXISTS `{DEMO_DB}` CASCADE")
    create_demo_tables(spark, DEMO_DB, scale=DEMO_SCALE)
    try:
        with dagster_dev(tmp_path, metastore.uri) as ui:
            yield ui
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS `{DEMO_DB}` CASCADE")


@pytest.fixture
def browser() -> Iterator[Page]:
    """A page in Debian's headless Chromium; skipped (failed under LAKEKEEPER_REQUIRE_BROWSER=1) when missing."""
    found = {"chromium": Path(CHROMIUM).exists(), "playwright": sync_playwright is not None}
    missing = [what for what, there in found.items() if not there]
    if missing:
        reason = f"{' and '.join(missing)} not installed: apt-get install chromium; pip install -e '.[test]'"
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{REQUIRE}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = chromium.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(UI_TIMEOUT_MS)
        # Dagster's "Join the Dagster community" dialog opens a second after any page of a new browser profile; a
        # handler clicking its Skip raced the Materialize dialog (which then intercepts the click). The UI keeps its
        # dismissal in localStorage (`communityNux`, as its own Skip stores it): set before any page script runs.
        page.add_init_script("window.localStorage.setItem('communityNux', JSON.stringify('1'))")
        yield page
        chromium.close()


def screenshot(page: Page, ui: DagsterUI, name: str) -> Path:
    path = ui.shots / f"{name}.png"
    page.screenshot(path=path, full_page=True)
    return path


@contextmanager
def step(page: Page, ui: DagsterUI, name: str) -> Iterator[None]:
    """One step of the walk: a screenshot after it, and on failure a message naming the screenshot and the log."""
    try:
        yield
    except (AssertionError, PlaywrightError) as error:
        path = screenshot(page, ui, f"{name}-failed")
        pytest.fail(f"{name}: {error}\nscreenshot {path}; {ui.explain()}", pytrace=False)
    screenshot(page, ui, name)


def visible_text(page: Page, text: str):
    """The first visible element whose whole text is `text` (the UI also keeps hidden, untruncated copies)."""
    return page.get_by_text(text, exact=True).filter(visible=True).first


def shown_figures(page: Page, labels: list[str]) -> dict[str, str]:
    """label -> value of the metadata table rows the page shows (first row per label; the value is the last cell)."""
    visible_text(page, labels[0]).wait_for()
    shown = {}
    for label in labels:
        for row in page.locator("tr").filter(has_text=label).all():
            cells = [cell.strip() for cell in row.locator("td").all_inner_texts()]
            if cells and cells[0] == label:
                shown[label] = cells[-1]
                break
    return shown


def line_after(page: Page, label: str) -> str:
    """The line the page shows right after the line `label` (e.g. the value under a heading)."""
    visible_text(page, label).wait_for()
    lines = [line.strip() for line in page.inner_text("body").splitlines() if line.strip()]
    return lines[lines.index(label) + 1]


def materialize_partition(page: Page, partition: str) -> None:
    """On an asset page: Materialize, pick one partition in the dialog, launch its run."""
    page.get_by_role("button").filter(has_text=re.compile("^Materialize")).first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("Select a partition or create one").click()
    visible_text(page, partition).click()
    page.keyboard.press("Escape")  # closes the partition list, not the dialog
    dialog.get_by_text("1 partition", exact=True).wait_for()  # the dialog's count of the selected partitions
    dialog.get_by_role("button", name="Launch 1 run").click()
    page.get_by_text("Launched run").wait_for()


PARTITION_RUNS_QUERY = """
query($tags: [ExecutionTag!]) { runsOrError(filter: {tags: $tags}) { ... on Runs { results { runId jobName } } } }
"""


def partition_run(ui: DagsterUI, partition: str) -> tuple[str, str]:
    """The id and job of the one run launched for `partition`."""
    tags = [{"key": "dagster/partition", "value": partition}]
    runs = graphql(ui.url, PARTITION_RUNS_QUERY, {"tags": tags})["runsOrError"]["results"]
    assert len(runs) == 1, f"runs of {partition}: {runs}; {ui.explain()}"
    return runs[0]["runId"], runs[0]["jobName"]


def wait_for_partitions(page: Page, ui: DagsterUI) -> None:
    """The table's Partitions tab, reloaded until it lists every Hive partition."""
    deadline = time.monotonic() + PARTITIONS_TIMEOUT
    while True:
        page.goto(f"{ui.url}/assets/{asset_path(TABLE)}?view=partitions")
        try:
            for partition in PARTITIONS:
                visible_text(page, partition).wait_for(timeout=15_000)
            return
        except PlaywrightError:
            if time.monotonic() > deadline:
                raise


def partition_dir(spark, table: str, partition: str) -> Path:
    return Path(urllib.parse.urlparse(database_location(spark, DEMO_DB)).path) / table / partition


@pytest.mark.browser
def test_fresh_clone_walkthrough_in_chromium(browser, demo_ui, spark):
    """demo tables -> UI -> the three assets with partitions -> one partition materialized -> figures shown."""
    page, ui = browser, demo_ui
    table = f"{DEMO_DB}.{TABLE}"
    before = rows_of(spark, table)
    files_before = {p: len(data_files(partition_dir(spark, TABLE, p))) for p in PARTITIONS}

    with step(page, ui, "1-catalog"):
        page.goto(f"{ui.url}/assets")
        page.locator(f'a[href="/assets/{asset_path(TABLE)}"]').first.wait_for()
        links = {link.get_attribute("href") for link in page.locator('a[href^="/assets/hive/"]').all()}
        assert links == {f"/assets/{asset_path(t)}" for t in ASSETS}, links

    with step(page, ui, "2-partitions"):
        wait_for_partitions(page, ui)  # no job run: the partition sensor, running by default, adds them

    with step(page, ui, "3-materialize"):
        page.goto(f"{ui.url}/assets/{asset_path(TABLE)}")
        materialize_partition(page, PARTITION)
    run_id, job = partition_run(ui, PARTITION)
    assert job == JOB, f"the UI launched {job}, not the table's compaction job"
    assert wait_for_run(ui, run_id) == "SUCCESS", f"run {run_id} failed; {ui.explain()}"

    # The data first: the partition's rows are what they were, in fewer files; the other partitions are untouched.
    after = rows_of(spark, table)
    assert after == before
    rows = sum(1 for row in after if f"date={row[-1]}" == PARTITION)
    files_after = {p: len(data_files(partition_dir(spark, TABLE, p))) for p in PARTITIONS}
    assert files_after == {**files_before, PARTITION: 1}, (files_before, files_after)
    expected = run_figures(files_before[PARTITION], files_after[PARTITION], rows)

    with step(page, ui, "4-run"):
        page.goto(f"{ui.url}/runs/{run_id}")
        assert shown_figures(page, list(expected)) == expected
        checksums = shown_figures(page, ["checksum_before", "checksum_after"])
        assert checksums["checksum_before"] == checksums["checksum_after"] != "", checksums
        assert re.fullmatch(r"[0-9.]+ [KMG]?B", shown_figures(page, ["size_after"])["size_after"])

    with step(page, ui, "5-asset"):
        page.goto(f"{ui.url}/assets/{asset_path(TABLE)}")
        visible_text(page, PARTITION).wait_for()  # under "Latest materialization"
        assert shown_figures(page, list(expected)) == expected

    with step(page, ui, "6-check"):
        page.goto(f"{ui.url}/assets/{asset_path(TABLE)}?view=checks&checkDetail={CHECK}")
        assert line_after(page, "Evaluation result") == CHECK_RESULT
        assert shown_figures(page, list(check_figures(rows))) == check_figures(rows)
