module github.com/annal-db/annal

go 1.26.8

require (
	github.com/klauspost/crc32 v1.3.0
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.9
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	golang.org/x/sys v0.34.0 // indirect
)
