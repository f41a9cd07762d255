// Command grafana-dashboard-check is the schema check of pko's shipped Grafana dashboard: it loads each named
// dashboard JSON file into the typed dashboard model of the Grafana Foundation SDK (the model Grafana's own schema
// generates) with its strict decoder, so an unknown or misspelt field, a value of the wrong type or a missing
// required field is an error, then runs the model's Validate. Panel options and field configs are decoded by the
// model of their panel type, and each target by the model of its data source's query. A panel type the SDK does
// not know is an error too (Grafana would show "panel plugin not found").
//
// Usage: grafana-dashboard-check FILE...   prints one line per problem, exits 1 when there is any.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// lines is one line per problem an SDK error holds. (The strict decoder returns its error list even when it is
// empty, as a non-nil error.)
func lines(err error) []string {
	var list cog.BuildErrors
	if errors.As(err, &list) {
		out := make([]string, 0, len(list))
		for _, problem := range list {
			out = append(out, problem.Error())
		}
		return out
	}
	if err != nil {
		return []string{err.Error()}
	}
	return nil
}

func check(path string) []string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	var model dashboard.Dashboard
	problems := lines(model.UnmarshalJSONStrict(raw))
	if len(problems) == 0 {
		problems = lines(model.Validate())
	}
	// The strict decoder falls back to a loose decode for a panel type it has no model for: name those.
	var loose struct {
		Panels []struct {
			Type   string `json:"type"`
			Title  string `json:"title"`
			Panels []struct {
				Type  string `json:"type"`
				Title string `json:"title"`
			} `json:"panels"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &loose); err != nil {
		return append(problems, err.Error())
	}
	known := func(kind, title string) {
		if _, found := cog.ConfigForPanelcfgVariant(kind); !found && kind != "row" {
			problems = append(problems, fmt.Sprintf("panel %q: unknown panel type %q", title, kind))
		}
	}
	for _, panel := range loose.Panels {
		known(panel.Type, panel.Title)
		for _, inner := range panel.Panels {
			known(inner.Type, inner.Title)
		}
	}
	return problems
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: grafana-dashboard-check FILE...")
		os.Exit(2)
	}
	plugins.RegisterDefaultPlugins()
	failed := false
	for _, path := range os.Args[1:] {
		for _, problem := range check(path) {
			fmt.Printf("%s: %s\n", path, problem)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
