module github.com/websummoner/websummoner/images/pause

go 1.26.0
