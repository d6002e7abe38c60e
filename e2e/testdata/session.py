"""Creates one session with Python Selenium (credentials in the hub URL, as
users write them), prints its id, and ends it when told on stdin."""
import sys

from selenium import webdriver
from selenium.webdriver.common.options import ArgOptions

opts = ArgOptions()
opts.set_capability("browserName", sys.argv[2])
driver = webdriver.Remote(command_executor=sys.argv[1], options=opts)
print(driver.session_id, flush=True)
sys.stdin.readline()
driver.quit()
