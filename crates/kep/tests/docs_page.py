#!/usr/bin/env python3
"""Headless Chromium on kep's `/docs` (tests/it/serve/browser.rs): every OpenAPI document
renders in the vendored Swagger UI with its operations, with no network but loopback (the
test runs this in a network namespace of its own). Prints one JSON line per document:
{"doc", "operations", "servers"}; exits 1 with the failed step otherwise.
"""
import json
import sys

from playwright.sync_api import sync_playwright

from kep_serve import serving

KEP = sys.argv[1]


def main():
    with serving(KEP) as (_, urls):
        admin = urls["admin"]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = browser.new_page()
            for doc in ("admin", "live", "adapter", "messaging"):
                page.goto(f"{admin}/docs?doc={doc}")
                page.wait_for_selector(".opblock", timeout=30000)
                operations = page.locator(".opblock").count()
                servers = page.locator(".servers select option").all_inner_texts()
                print(json.dumps({"doc": doc, "operations": operations, "servers": servers}), flush=True)
            browser.close()


if __name__ == "__main__":
    main()
