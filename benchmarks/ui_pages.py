"""The Dagster UI at an estate, in a real browser (Debian's chromium driven by Playwright, as the browser test): the
seconds from navigation until the asset catalog shows its link to the estate's first table, and until a table's
Partitions tab shows one of its partitions, each then until the page's network is idle; `loads` loads each (the
first is cold). Used by `benchmarks/estate.py --ui`."""

from __future__ import annotations

import re
import time

from lakekeeper_dagster_tests.surface.test_browser import CHROMIUM, CHROMIUM_ARGS

TIMEOUT_MS = 300_000


def _timed(page, url: str, visible) -> dict:
    started = time.monotonic()
    page.goto(url, wait_until="commit", timeout=TIMEOUT_MS)
    visible(page).wait_for(timeout=TIMEOUT_MS)
    shown = time.monotonic() - started
    page.wait_for_load_state("networkidle", timeout=TIMEOUT_MS)
    return {"shown_s": round(shown, 2), "idle_s": round(time.monotonic() - started, 2)}


def page_times(port: int, database: str, tables: list[str], partition_key: str, loads: int = 2) -> dict:
    """The catalog's and the first table's Partitions tab's times (`partition_key`: the partitions' column)."""
    from playwright.sync_api import sync_playwright

    url = f"http://127.0.0.1:{port}"
    first = tables[0]
    link = f"/assets/hive/{database}/{first}"  # the catalog's link to the first table's asset
    partition = re.compile(rf"^{re.escape(partition_key)}=\S+$")
    figures: dict = {"catalog": [], "partitions_tab": []}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            for _ in range(loads):
                figures["catalog"].append(_timed(page, f"{url}/assets", lambda p: p.locator(f'a[href="{link}"]').first))
                figures["partitions_tab"].append(
                    _timed(
                        page,
                        f"{url}/assets/hive/{database}/{first}?view=partitions",
                        lambda p: p.get_by_text(partition).filter(visible=True).first,
                    )
                )
        finally:
            browser.close()
    return figures
