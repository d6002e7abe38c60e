"""A real WebDriver client run by the end-to-end tests: Python Selenium through the
hub into a real Chromium. Prints one JSON line with what it saw."""
import json
import sys
import time

from selenium import webdriver
from selenium.webdriver.common.by import By

hub, page, shot, hold = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
wait = len(sys.argv) > 5 and sys.argv[5] == "wait"
t0 = time.time()
driver = webdriver.Remote(command_executor=hub, options=webdriver.ChromeOptions())
created = time.time() - t0
try:
    if wait:
        # The test sets up the page (in the browser's own network namespace) now.
        print(json.dumps({"created": driver.session_id}), flush=True)
        sys.stdin.readline()
    driver.get(page)
    title = driver.title
    text = driver.find_element(By.ID, "greeting").text
    png = driver.get_screenshot_as_png()
    with open(shot, "wb") as f:
        f.write(png)
    # What nearly every suite's set-up does: on a virtual screen, only a
    # window manager makes it work.
    window = ""
    try:
        driver.maximize_window()
        rect = driver.get_window_rect()
        driver.minimize_window()
        window = "%dx%d" % (rect["width"], rect["height"])
    except Exception as e:
        window = "failed: " + str(e).splitlines()[0]
    time.sleep(hold)
finally:
    driver.quit()
print(json.dumps({"session": driver.session_id, "title": title, "text": text, "created": created, "png": len(png),
                  "window": window}))
