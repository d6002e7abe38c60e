"""One Chromium session through the hub with Python Selenium's stock
ChromeOptions(): opens a page, finds an element, runs a script, prints the
session id and what it read, and (with "wait") keeps the session until a
line arrives on stdin. argv: hub URL, [wait]."""
import sys

from selenium import webdriver
from selenium.webdriver.common.by import By

driver = webdriver.Remote(command_executor=sys.argv[1], options=webdriver.ChromeOptions())
try:
    driver.get("data:text/html,<title>pod</title><p id='x'>from a pod</p>")
    text = driver.find_element(By.ID, "x").text
    agent = driver.execute_script("return navigator.userAgent")
    print(driver.session_id, driver.title, text.replace(" ", "_"), "Chrome" in agent, flush=True)
    if len(sys.argv) > 2 and sys.argv[2] == "wait":
        sys.stdin.readline()
finally:
    driver.quit()
