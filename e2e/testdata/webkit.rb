# Ruby's Selenium client (Debian's ruby-selenium-webdriver) into WebKit
# through the hub, run by the WebKit tests: a second client language.
# Prints session|title|typed|userAgent.
require 'selenium-webdriver'

# "webkit": an alias of the MiniBrowser entry, as users will try it.
caps = Selenium::WebDriver::Remote::Capabilities.new(browser_name: 'webkit')
driver = Selenium::WebDriver.for(:remote, url: ARGV[0], capabilities: caps)
begin
  driver.navigate.to "data:text/html,<title>from ruby</title><input id=i>"
  driver.find_element(id: 'i').send_keys('typed by ruby')
  puts [driver.session_id, driver.title, driver.execute_script("return document.getElementById('i').value"),
        driver.execute_script('return navigator.userAgent')].join('|')
ensure
  driver.quit
end
