module xseld

go 1.22
