package communitydeletion_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The public packages keep small call shapes: no exported function or
// method takes more than four parameters besides its context. Longer ones
// take a *Params or *Opts struct.
func TestExportedCallsTakeAtMostFourParameters(t *testing.T) {
	for _, dir := range []string{"lifecycle", "executor", "executor/s3store", "executor/rediscache", "executor/storeurl", "migration"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, entry := range entries {
			name := entry.Name()
			if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range file.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || !fn.Name.IsExported() || (fn.Recv != nil && !exportedReceiver(fn.Recv)) {
					continue
				}
				params := 0
				for i, field := range fn.Type.Params.List {
					n := max(len(field.Names), 1)
					if i == 0 && isContext(field.Type) {
						n--
					}
					params += n
				}
				if params > 4 {
					t.Errorf("%s: %s takes %d parameters besides its context; give it a Params struct",
						fset.Position(fn.Pos()), fn.Name.Name, params)
				}
			}
		}
	}
}

func exportedReceiver(recv *ast.FieldList) bool {
	typ := recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	ident, ok := typ.(*ast.Ident)
	return ok && ident.IsExported()
}

func isContext(expr ast.Expr) bool {
	sel, ok := expr.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Context"
}
