module github.com/spdl-go/spdl-go

go 1.26

require (
	github.com/apache/arrow-go/v18 v18.8.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
)
