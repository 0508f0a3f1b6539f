// Command pulumi-resource-kubernetes serves the Kubernetes provider package
// from its Go module with the schema that module ships (the bootstrap script
// copies schema.json and terraform-mapping.json here before building, because
// go:embed only reads files inside the package directory).
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema.json
var pulumiSchema []byte

//go:embed terraform-mapping.json
var terraformMapping []byte

func main() {
	provider.Serve("kubernetes", version.Version, pulumiSchema, terraformMapping)
}
