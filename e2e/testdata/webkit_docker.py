"""Python Selenium's WebKitGTK client through the hub into the project's WebKit
image (TestDockerWebKit). WebKitGTKOptions names no binary: the hub's
browsers.json entry gives MiniBrowser's. Opens a page of one colour with an
input, types into it, runs a script and takes a screenshot, then prints one JSON
line with what it saw and waits for a line on stdin before it quits, so that
the test can look at the session (VNC, side channels) while it lives."""
import json
import sys
import tempfile

from selenium import webdriver
from selenium.webdriver.common.by import By

hub, shot, vendor, colour = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
options = webdriver.WebKitGTKOptions()
options.set_capability("selenoid:options", vendor)
driver = webdriver.Remote(command_executor=hub, options=options)
try:
    driver.get("data:text/html,<body style='margin:0;background:rgb(%s)'><input id='in'><input id='f' type='file'></body>" % colour)
    box = driver.find_element(By.ID, "in")
    box.send_keys("typed into WebKit")
    value = box.get_property("value")
    # A file of the client's machine: the hub stores it in the container
    # (WebKitWebDriver has no /file) and the input gets its path there.
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as up:
        up.write("uploaded into a container")
    driver.find_element(By.ID, "f").send_keys(up.name)
    upload = driver.execute_script("var f = document.getElementById('f').files[0]; return f ? f.name + ':' + f.size : ''")
    upload_want = up.name.rsplit("/", 1)[-1] + ":25"
    agent = driver.execute_script("return navigator.userAgent")
    # Two animation frames first: WebKit's screenshot of a fresh browser's
    # first page, just after the hub sized its window, can come before the
    # page's first paint (all white).
    driver.execute_async_script("var done = arguments[0]; requestAnimationFrame(() => requestAnimationFrame(done))")
    png = driver.get_screenshot_as_png()
    with open(shot, "wb") as f:
        f.write(png)
    size = driver.get_window_size()
    # Smaller, then maximized: the image's window manager makes it the whole
    # screen again (without one, Maximize Window does nothing).
    driver.set_window_size(800, 600)
    driver.maximize_window()
    maxed = driver.get_window_size()
    print(json.dumps({"session": driver.session_id, "caps": driver.capabilities, "value": value,
                      "userAgent": agent, "upload": upload, "uploadWant": upload_want, "window": [size["width"], size["height"]],
                      "maximized": [maxed["width"], maxed["height"]]}), flush=True)
    sys.stdin.readline()
finally:
    driver.quit()
print(json.dumps({"quit": driver.session_id}))
