"""The report page, loaded in real headless Chromium (Debian's package) through Playwright."""

from __future__ import annotations


def test_report_shows_findings_first_and_draws_its_charts(
    input_bound_job, service_factory, browser, tmp_path
):
    service = service_factory([input_bound_job.address])
    with service.client() as client:
        body = client.post("/profile", params={"duration": "2s", "wait": "true"}).json()
    assert body["status"] == "ready", body.get("error")

    page = browser.new_page(viewport={"width": 1100, "height": 900})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    response = page.goto(f"{service.url}{body['links']['report']}")
    assert response.status == 200

    # Findings come first, and the input-bound one is on screen.
    finding = page.locator('.finding[data-rule="input_bound"]')
    assert finding.is_visible()
    assert "input pipeline is the bottleneck" in finding.inner_text()
    first_h2 = page.locator("h2").first.inner_text()
    assert first_h2 == "Findings"

    # The step-time chart drew one stacked bar per step, with real size on screen.
    bars = page.locator("#step-chart rect.bar")
    assert bars.count() >= body["summary"]["step_time"]["count"]
    box = page.locator("#step-chart").bounding_box()
    assert box and box["width"] > 500 and box["height"] > 100
    assert bars.first.bounding_box()["height"] > 0
    assert page.locator("#category-chart rect.bar").count() >= 1
    assert page.locator("#top-ops tr").count() > 1

    # Links reach the raw file; nothing was fetched from anywhere but the service (no CDN).
    file_link = page.locator("#links a", has_text=body["files"][0]["name"])
    assert file_link.get_attribute("href") == body["links"]["files"][body["files"][0]["name"]]
    assert all(url.startswith(service.url) for url in requests), requests

    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    assert (tmp_path / "report.png").stat().st_size > 20_000
    page.close()


def test_report_of_a_failed_snapshot_says_why(service_factory, browser):
    from helpers import free_port, wait_for_status

    service = service_factory([f"grpc://127.0.0.1:{free_port()}"])
    with service.client() as client:
        snapshot = client.post("/profile", params={"duration": "500ms"}).json()
        wait_for_status(client, snapshot["id"], {"failed"})
    page = browser.new_page()
    page.goto(f"{service.url}/profiles/{snapshot['id']}/report")
    error = page.locator("#error").inner_text()
    assert "target_unreachable" in error.lower() and "profiler server unreachable" in error
    assert "No analysis for this snapshot" in page.locator("#findings").inner_text()
    page.close()
