module github.com/dranode/dranode/cdi

go 1.26.0

require github.com/dranode/dranode/checkpoint v0.0.0-00010101000000-000000000000

replace github.com/dranode/dranode/checkpoint => ../checkpoint
