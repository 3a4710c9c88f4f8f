"""The run page as a person sees it: Debian's Chromium (installed by
``scripts/chromium_local.sh``), driven headless by Playwright."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT

SCRIPT = ROOT / "scripts" / "chromium_local.sh"
SECTIONS = ("stages", "curves", "funnel", "rejects", "graph", "steps")


def chromium() -> str:
    done = subprocess.run(["bash", str(SCRIPT), "install"], capture_output=True, text=True)
    found = shutil.which("chromium")
    if done.returncode != 0 or found is None:
        pytest.fail(f"Chromium could not be installed: {done.stderr[-2000:]}")
    return found


@dataclass
class Seen:
    errors: list[str] = field(default_factory=list)  # console errors and page errors
    sections: dict[str, tuple[float, float]] = field(default_factory=dict)  # id: (top, height)
    broken_links: list[str] = field(default_factory=list)  # #targets no element has
    jumps: dict[str, float] = field(default_factory=dict)  # nav link -> its target's top after


def view_page(page: Path, shots: Path) -> Seen:
    """Opens ``page`` in headless Chromium: records console errors, each section's place, links
    whose target is missing, and for each navigation link, where its target is in the window
    after a click (0: at the top); screenshots the top of the page and each section into
    ``shots``."""
    from playwright.sync_api import sync_playwright

    seen = Seen()
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            tab.on("console", lambda m: m.type == "error" and seen.errors.append(m.text))
            tab.on("pageerror", lambda e: seen.errors.append(str(e)))
            tab.on("requestfailed", lambda r: seen.errors.append(f"request failed: {r.url}"))
            tab.goto(page.resolve().as_uri())
            tab.screenshot(path=str(shots / "top.png"))
            places = tab.evaluate(
                """() => [...document.querySelectorAll('section')].map(s => {
                    const box = s.getBoundingClientRect();
                    return [s.id, box.top + window.scrollY, box.height];
                })"""
            )
            seen.sections = {name: (top, height) for name, top, height in places}
            for name in seen.sections:
                tab.locator(f"section#{name}").screenshot(path=str(shots / f"{name}.png"))
            seen.broken_links = tab.evaluate(
                """() => [...document.querySelectorAll('a[href^="#"]')]
                    .map(a => a.getAttribute('href').slice(1))
                    .filter(id => !document.getElementById(id))"""
            )
            for link in tab.locator("nav a").all():
                target = str(link.get_attribute("href"))
                tab.evaluate("() => window.scrollTo(0, 0)")
                link.click()
                tab.wait_for_timeout(50)
                seen.jumps[target] = float(
                    tab.evaluate(
                        "id => document.getElementById(id).getBoundingClientRect().top",
                        target[1:],
                    )
                )
        finally:
            browser.close()
    return seen


def read_page(page: Path, script: str) -> tuple[list[str], Any]:
    """Opens ``page`` in headless Chromium and evaluates ``script`` (a JavaScript function of
    no arguments) on it: the console and page errors, and what the function returned."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            tab.on("console", lambda m: m.type == "error" and errors.append(m.text))
            tab.on("pageerror", lambda e: errors.append(str(e)))
            tab.goto(page.resolve().as_uri())
            found = tab.evaluate(script)
        finally:
            browser.close()
    return errors, found
