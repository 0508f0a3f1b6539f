//go:build tools

// Package tools pins the Pulumi CLI main package so `go mod tidy` keeps its
// dependency graph in go.sum.
package tools

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
