package main

import (
	"flag"
	"fmt"
	"io"
)

// flagTable renders the flags of `raftlog serve` as a Markdown table, with
// their environment variables: docs/operations.md embeds it, and a test
// keeps the two equal.
func flagTable(w io.Writer) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var f serveFlags
	f.register(fs)
	fmt.Fprintln(w, "| flag | environment | default | meaning |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	fs.VisitAll(func(fl *flag.Flag) {
		env := flagEnv(fl.Name)
		def := fl.DefValue
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "| `--%s` | `%s` | `%s` | %s |\n", fl.Name, env, def, fl.Usage)
	})
}
