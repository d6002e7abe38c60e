"""Python Selenium uploads a local file into a real Chromium through the hub:
send_keys of a path on a file input goes through Selenium 4's /se/file. The page
reads the file back; prints what it read as one JSON line."""
import json
import sys
import tempfile

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

hub, page, content = sys.argv[1], sys.argv[2], sys.argv[3]
wait = len(sys.argv) > 4 and sys.argv[4] == "wait"
with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
    f.write(content)
driver = webdriver.Remote(command_executor=hub, options=webdriver.ChromeOptions())
try:
    if wait:
        # The test sets up the page (in the browser's own network namespace) now.
        print(json.dumps({"created": driver.session_id}), flush=True)
        sys.stdin.readline()
    driver.get(page)
    driver.find_element(By.ID, "file").send_keys(f.name)
    WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "upload").text != "")
    read = driver.find_element(By.ID, "upload").text
finally:
    driver.quit()
print(json.dumps({"read": read}))
