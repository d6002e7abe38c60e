"""Sessions one after another, run by the warm-pool test: Python Selenium
through the hub into Chromium containers. Before each session it waits for a
line on stdin (the test waits for the pool to be ready); each session reads
what an earlier one could have left (a cookie, localStorage, downloads) on
the container's own file server page, leaves all three behind itself, and
prints one JSON line."""
import json
import sys
import time
import urllib.request

from selenium import webdriver

hub, modes = sys.argv[1], sys.argv[2].split(",")


def get_json(path):
    with urllib.request.urlopen(hub + path, timeout=60) as r:
        return json.load(r)


def container_of(sid):
    for versions in get_json("/status")["browsers"].values():
        for quotas in versions.values():
            for q in quotas.values():
                for s in q["sessions"]:
                    if s["id"] == sid:
                        return s["containerInfo"]["id"]
    return None


for i, mode in enumerate(modes):
    sys.stdin.readline()
    opts = webdriver.ChromeOptions()  # stock: a hit
    if mode == "near":
        opts.add_argument("--lang=de")  # other browser options, the same container
    elif mode == "miss":
        opts.set_capability("selenoid:options", {"screenResolution": "1280x1024x24"})
    t0 = time.time()
    d = webdriver.Remote(command_executor=hub + "/wd/hub", options=opts)
    created = time.time() - t0
    try:
        sid = d.session_id
        d.get("http://127.0.0.1:8080/")
        seen = {
            "cookie": d.execute_script("return document.cookie"),
            "storage": d.execute_script("return localStorage.getItem('k')"),
            "downloads": get_json("/download/%s/?json" % sid),
        }
        name = "s%d.txt" % i
        d.execute_script(
            "document.cookie = 'k=%s; max-age=3600'; localStorage.setItem('k', '%s');"
            "var a = document.createElement('a'); a.href = 'data:text/plain,secret'; a.download = '%s';"
            "document.body.appendChild(a); a.click();" % (name, name, name))
        deadline = time.time() + 60
        while name not in get_json("/download/%s/?json" % sid) and time.time() < deadline:
            time.sleep(0.2)
        print(json.dumps({"mode": mode, "session": sid, "container": container_of(sid), "created": created,
                          "seen": seen, "downloaded": name in get_json("/download/%s/?json" % sid)}), flush=True)
    finally:
        d.quit()
