"""The ctrexec command line: flags in, one library call, output out."""
