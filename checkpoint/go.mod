module github.com/dranode/dranode/checkpoint

go 1.26.0

require github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc
