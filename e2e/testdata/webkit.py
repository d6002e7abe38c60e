"""Python Selenium into WebKit (MiniBrowser) through the hub, run by the
WebKit tests: WebKitGTKOptions with nothing but the session's screen (the
browsers.json entry supplies MiniBrowser and --automation). Arguments: the
hub, the screen, then "wait" (stop for a line on stdin while the session
lives) and a URL to visit first, in either order. Prints one JSON line with
what it saw."""
import base64
import json
import sys
import tempfile

from selenium import webdriver
from selenium.webdriver.common.by import By

hub, screen = sys.argv[1], sys.argv[2]
opts = webdriver.WebKitGTKOptions()
wait = "wait" in sys.argv[3:]
visit = next((a for a in sys.argv[3:] if a.startswith("http")), None)
opts.set_capability("selenoid:options", {"screenResolution": screen})
driver = webdriver.Remote(command_executor=hub, options=opts)
try:
    visited = ""
    if visit:
        driver.get(visit)
        visited = driver.title
    driver.get("data:text/html,<title>webkit</title><body style='margin:0;background:rgb(0,128,255)'>"
               "<input id=t><input id=f type=file><a id=d href='data:text/plain,downloaded' download='wk-dl.txt'>d</a></body>")
    driver.find_element(By.ID, "t").send_keys("typed in WebKit")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as up:
        up.write("uploaded through the hub")
    driver.find_element(By.ID, "f").send_keys(up.name)
    # Two animation frames before the screenshot: WebKit's can come before
    # a fresh page's first paint (all white), as in webkit_docker.py.
    driver.execute_async_script("var done = arguments[0]; requestAnimationFrame(() => requestAnimationFrame(done))")
    seen = {
        "session": driver.session_id,
        "visited": visited,
        "title": driver.title,
        "typed": driver.execute_script("return document.getElementById('t').value"),
        "agent": driver.execute_script("return navigator.userAgent"),
        "upload": driver.execute_script("var f = document.getElementById('f').files[0]; return f ? f.name + ':' + f.size : ''"),
        "uploadName": up.name.rsplit("/", 1)[-1],
        "window": driver.get_window_size(),
        "cdp": driver.capabilities.get("se:cdp"),
        "png": base64.b64encode(driver.get_screenshot_as_png()).decode(),
    }
    driver.execute_script("document.getElementById('d').click()")
    if wait:
        # The test looks at the live session from outside now: its
        # download among them.
        print(json.dumps({"created": driver.session_id}), flush=True)
        sys.stdin.readline()
finally:
    driver.quit()
print(json.dumps(seen))
