#!/usr/bin/env python3
"""Headless Chromium on kep's demo page over https, from an address that is not loopback.

A browser grants the camera only to a secure context: a page of another machine is one
only over https. Run inside a network namespace of the test's own with a veth pair whose
ends are 10.77.0.1 and 10.77.0.2 (nothing leaves it): `kep serve --tls-self-signed` on
10.77.0.1, its CA trusted in the NSS database Chromium reads ($HOME/.pki/nssdb, a temp
HOME), one page publishing Chromium's fake camera, another showing it. Prints JSON lines;
exits 0 when every step held, 1 with the failed step otherwise.
"""
import json
import os
import ssl
import subprocess
import sys
import tempfile
import urllib.request

from playwright.sync_api import sync_playwright

from kep_serve import emit, publish_and_show, serving, until

KEP = sys.argv[1]
HOST = "10.77.0.1"


def main():
    with serving(KEP, "--only", "live", "--tls-self-signed", host=HOST,
                 KEP_ADMIN_TOKEN="op") as (env, urls):
        ca = os.path.join(env["KEP_DATA_DIR"], "tls", "ca.pem")
        home = tempfile.mkdtemp()
        nssdb = os.path.join(home, ".pki", "nssdb")
        os.makedirs(nssdb)
        certutil = ["certutil", "-d", f"sql:{nssdb}"]
        subprocess.run([*certutil, "-N", "--empty-password"], check=True)
        subprocess.run([*certutil, "-A", "-t", "C,,", "-n", "kep test CA", "-i", ca], check=True)
        run(env, urls, ca, home)


def run(env, urls, ca, home):
    live = urls["live"]
    emit("urls", admin=urls["admin"], live=live)
    trusting = ssl.create_default_context(cafile=ca)
    req = urllib.request.Request(
        f"{urls['admin']}/admin/v1/live/services", method="POST",
        data=b'{"serviceId": "demo"}',
        headers={"Authorization": "Bearer op", "Content-Type": "application/json"})
    secrets = json.load(urllib.request.urlopen(req, context=trusting))

    def token(who):
        out = subprocess.run(
            [KEP, "live", "token", "stage", who, "--service-id", "demo",
             "--service-secret", secrets["serviceSecret"]],
            env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout)["token"]

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            env=dict(os.environ, HOME=home),
            args=["--no-sandbox", "--use-fake-device-for-media-stream",
                  "--use-fake-ui-for-media-stream"])
        # The page alone first: is it a secure context (else no camera)?
        page = browser.new_page()
        page.goto(f"{live}/demo?token={token('carol')}&publish=0")
        secure = page.evaluate("window.isSecureContext && !!navigator.mediaDevices")
        emit("secure context", secure=secure, origin=page.evaluate("location.origin"))
        if not secure:
            emit("failed", step="the page is a secure context")
            sys.exit(1)
        page.close()
        publish_and_show(browser, live, token)
        browser.close()


if __name__ == "__main__":
    main()
