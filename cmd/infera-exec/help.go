package main

import (
	_ "embed"
	"strings"

	"github.com/infera/infera-exec/config"
)

//go:embed help.txt
var helpTemplate string

// helpText is the usage: help.txt, with the options and the environment
// rendered by config from its one table of each.
func helpText() string {
	return strings.NewReplacer("{{options}}", config.HelpOptions(), "{{environment}}", config.HelpEnvironment()).Replace(helpTemplate)
}
