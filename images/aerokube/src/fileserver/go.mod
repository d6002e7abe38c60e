module fileserver

go 1.22

require github.com/aandryashin/matchers v0.0.0-20161126170413-435295ea180e
