package httpapi

import (
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/engine"
)

// TestByIDsRoutes: ThingsBoard's "by ids" reads, with the ids parameter on the
// list path and on its /list form: what the caller may read, in the order
// asked; unknown and foreign ids left out; no ids 400; the paged form unchanged.
func TestByIDsRoutes(t *testing.T) {
	n := startTestNode(t)
	sys, ta, cu := n.sysadmin(), n.tenant(), n.customer()
	other, ob := n.otherTenant("B")
	me, cust := n.userID(ta).ID.String(), n.Demo.DemoCustomerID.String()
	unknown := uuid.NewString()

	ids := func(path, auth string) []string {
		t.Helper()
		var out []struct {
			ID engine.EntityID `json:"id"`
		}
		n.decode(n.expect("GET", path, auth, nil, 200, ""), &out)
		got := make([]string, len(out))
		for i, v := range out {
			got[i] = v.ID.ID.String()
		}
		return got
	}
	want := func(got []string, want ...string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("got %v, want %v", got, want)
			}
		}
	}
	cuID := n.userID(cu).ID.String()
	for _, path := range []string{"/api/users?userIds=", "/api/users/list?userIds="} {
		want(ids(path+cuID+","+unknown+","+me, ta), cuID, me)
		want(ids(path+me+","+cuID, cu), cuID) // a customer user reads its peers, not the tenant admin
		want(ids(path+me, ob))
	}
	for _, path := range []string{"/api/customers?customerIds=", "/api/customers/list?customerIds="} {
		want(ids(path+cust+","+cust, ta), cust)
		want(ids(path+cust, ob))
	}
	n.expect("GET", "/api/customers?customerIds="+cust, cu, nil, 403, "")
	demoTenant := n.Demo.DemoTenantID.String()
	for _, path := range []string{"/api/tenants?tenantIds=", "/api/tenants/list?tenantIds="} {
		want(ids(path+other.ID.ID.String()+","+demoTenant, sys), other.ID.ID.String(), demoTenant)
		want(ids(path+other.ID.ID.String()+","+demoTenant, ta), demoTenant)
	}
	var prof engine.DeviceProfileInfo
	n.decode(n.expect("GET", "/api/deviceProfileInfo/default", ta, nil, 200, ""), &prof)
	for _, path := range []string{"/api/deviceProfileInfos?deviceProfileIds=", "/api/deviceProfileInfos/list?deviceProfileIds="} {
		want(ids(path+prof.ID.ID.String(), ta), prof.ID.ID.String())
		want(ids(path+prof.ID.ID.String(), ob))
	}
	var tp engine.EntityInfo
	n.decode(n.expect("GET", "/api/tenantProfileInfo/default", sys, nil, 200, ""), &tp)
	for _, path := range []string{"/api/tenantProfiles?ids=", "/api/tenantProfiles/list?ids="} {
		want(ids(path+unknown+","+tp.ID.ID.String(), sys), tp.ID.ID.String())
		n.expect("GET", path+tp.ID.ID.String(), ta, nil, 403, "")
	}

	n.expect("GET", "/api/users/list", ta, nil, 400, "Required request parameter 'userIds' for method parameter type String is not present")
	n.expect("GET", "/api/users?userIds=", ta, nil, 400, "Parameter 'userIds' can't be empty!")
	n.expect("GET", "/api/tenants/list?tenantIds=nope", sys, nil, 400, "")
	// Without ids the paths page as before.
	var page engine.PageData[map[string]any]
	n.decode(n.expect("GET", "/api/users?pageSize=10&page=0", ta, nil, 200, ""), &page)
	if page.TotalElements < 2 {
		t.Fatalf("users page: %+v", page)
	}
	n.expect("GET", "/api/tenantProfiles", sys, nil, 400, "Required request parameter 'pageSize' for method parameter type int is not present")
}

// TestTenantProfileRoutes: the info forms and the change of default over HTTP.
func TestTenantProfileRoutes(t *testing.T) {
	n := startTestNode(t)
	sys := n.sysadmin()
	var tp engine.TenantProfile
	n.decode(n.expect("POST", "/api/tenantProfile", sys, map[string]any{"name": "gold"}, 200, ""), &tp)
	id := tp.ID.ID.String()
	var info engine.EntityInfo
	n.decode(n.expect("GET", "/api/tenantProfileInfo/"+id, sys, nil, 200, ""), &info)
	if info.Name != "gold" || info.ID != tp.ID {
		t.Fatalf("info: %+v", info)
	}
	n.decode(n.expect("POST", "/api/tenantProfile/"+id+"/default", sys, nil, 200, ""), &tp)
	if !tp.Default {
		t.Fatalf("after set default: %+v", tp)
	}
	n.decode(n.expect("GET", "/api/tenantProfileInfo/default", sys, nil, 200, ""), &info)
	if info.ID != tp.ID {
		t.Fatalf("default info: %+v", info)
	}
	var page engine.PageData[engine.EntityInfo]
	n.decode(n.expect("GET", "/api/tenantProfileInfos?pageSize=1&page=0&sortProperty=name&sortOrder=DESC", sys, nil, 200, ""), &page)
	if page.TotalElements != 2 || !page.HasNext || page.Data[0].Name != "gold" {
		t.Fatalf("infos: %+v", page)
	}
	n.expect("GET", "/api/tenantProfileInfo/"+uuid.NewString(), sys, nil, 404, "")
	n.expect("POST", "/api/tenantProfile/"+uuid.NewString()+"/default", sys, nil, 404, "")
	n.expect("POST", "/api/tenantProfile/"+id+"/default", n.tenant(), nil, 403, "")
}
