#!/usr/bin/env python3
"""Headless Chromium on kep's `/docs` (tests/it/serve/browser.rs): every OpenAPI document
renders in the vendored Swagger UI with its operations, with no network but loopback (the
test runs this in a network namespace of its own). Prints one JSON line per document:
{"doc", "operations", "servers"}; exits 1 with the failed step otherwise.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

from playwright.sync_api import sync_playwright

KEP = sys.argv[1]


def main():
    data = tempfile.mkdtemp()
    env = dict(os.environ, KEP_DATA_DIR=data, KEP_LOG="warn")
    addrs = [f"--{l}-addr" for l in ("admin", "live", "adapter", "messaging", "gateway", "media")]
    args = [a for flag in addrs for a in (flag, "127.0.0.1:0")]
    server = subprocess.Popen([KEP, "serve", *args], env=env, stdout=subprocess.DEVNULL)
    try:
        path = os.path.join(data, "addresses.json")
        deadline = time.time() + 30
        while not os.path.exists(path):
            if time.time() > deadline:
                print(json.dumps({"failed": "kep serve starts"}))
                sys.exit(1)
            time.sleep(0.1)
        time.sleep(0.2)
        admin = "http://" + json.load(open(path))["admin"]
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
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
