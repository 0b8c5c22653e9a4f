package graph

import (
	"bytes"
	"strings"
	"fmt"
	"sort"
	"testing"
	"github.com/owulveryck/onnx-go/backend/testbackend"
	_ "github.com/owulveryck/onnx-go/backend/testbackend/onnx"
)

func TestScratch(t *testing.T) {
	all := testbackend.GetAllRegisteredTests()
	ops := map[string]int{}
	for _, c := range all {
		tc := c()
		var b bytes.Buffer
		tc.Dump(&b)
		s := b.String()
		n := strings.Count(s, "op_type:")
		ops[tc.OpType]++
		if n != 1 || strings.Contains(s, "initializer") || strings.Contains(s, "dim_param") || strings.Contains(s, " g:") {
			fmt.Println(tc.Title, tc.OpType, n, len(tc.Input), len(tc.ExpectedOutput))
			if len(s) < 3000 { fmt.Println(s) }
		}
	}
	var k []string
	for o := range ops { k = append(k, o) }
	sort.Strings(k)
	fmt.Println(k)
}
