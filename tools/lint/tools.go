//go:build tools

// Package tools pins golangci-lint for make lint. It is a module of its own,
// apart from tools/ (sqlc), so the two tools' dependencies never have to
// agree on a version.
package tools

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
