package fleetsim

import (
	"fmt"
	"reflect"
	"testing"
)

// The account-wide variable list's pages, taken from the devices' lists
// without building the whole list, are those the filtered path gives when
// its filter drops nothing (an unknown lookup is ignored): the same count
// and the same results, page by page, past the last page a 404 alike.
func TestVariablePagesEqualThoseOfTheWholeList(t *testing.T) {
	e := newEnv(t, Options{Devices: 13, Variables: 3, Points: 2})
	for _, size := range []int{1, 2, 3, 7, 39, 50} {
		for page := 1; page <= 39/size+2; page++ {
			q := fmt.Sprintf("/api/v2.0/variables/?page_size=%d&page=%d", size, page)
			fast, whole := e.get(q), e.get(q+"&name__nosuchlookup=x")
			if fast.status != whole.status {
				t.Fatalf("%s: status %d, the whole list's %d", q, fast.status, whole.status)
			}
			if fast.status != 200 {
				continue
			}
			f, w := fast.json(t), whole.json(t)
			if f["count"] != float64(39) || !reflect.DeepEqual(f["count"], w["count"]) || !reflect.DeepEqual(f["results"], w["results"]) {
				t.Fatalf("%s: count %v and results %v, the whole list's %v and %v", q, f["count"], f["results"], w["count"], w["results"])
			}
			if (f["next"] == nil) != (w["next"] == nil) {
				t.Fatalf("%s: next %v, the whole list's %v", q, f["next"], w["next"])
			}
		}
	}
}
