package httpapi

import (
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/engine"
)

// Routes and answers of the device and customer API that an audit against
// ThingsBoard's controllers found missing or different.

func TestCustomerTitleShortInfoAndByTitle(t *testing.T) {
	n := startTestNode(t)
	ta, cu, sys := n.tenant(), n.customer(), n.sysadmin()
	_, other := n.otherTenant("B")
	var acme engine.Customer
	n.decode(n.expect("POST", "/api/customer", ta, map[string]string{"title": "Acme & Söhne"}, 200, ""), &acme)
	demo := "/api/customer/" + n.Demo.DemoCustomerID.String()
	path := "/api/customer/" + acme.ID.ID.String()
	unknownID := uuid.NewString()
	unknown := "/api/customer/" + unknownID
	notFound := "Customer with id [" + unknownID + "] is not found"

	// Title: plain text.
	resp, body := n.exchange("GET", path+"/title", ta, nil)
	if resp.StatusCode != 200 || string(body) != "Acme & Söhne" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/text") {
		t.Fatalf("title: %d %q %s", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
	var demoTitle string
	{
		var c engine.Customer
		n.decode(n.expect("GET", demo, ta, nil, 200, ""), &c)
		demoTitle = c.Title
	}
	if got := string(n.expect("GET", demo+"/title", cu, nil, 200, "")); got != demoTitle {
		t.Fatalf("customer user's title: %q, want %q", got, demoTitle)
	}
	n.expect("GET", path+"/title", cu, nil, 403, "You don't have permission to perform this operation!")
	n.expect("GET", path+"/title", other, nil, 403, "")
	n.expect("GET", path+"/title", sys, nil, 403, "")
	n.expect("GET", path+"/title", "", nil, 401, "")
	n.expect("GET", unknown+"/title", ta, nil, 404, notFound)
	n.expect("GET", "/api/customer/nope/title", ta, nil, 400, "Invalid UUID string: nope")

	// Short info.
	var info map[string]any
	n.decode(n.expect("GET", path+"/shortInfo", ta, nil, 200, ""), &info)
	if len(info) != 2 || info["title"] != "Acme & Söhne" || info["isPublic"] != false {
		t.Fatalf("short info: %v", info)
	}
	n.expect("GET", demo+"/shortInfo", cu, nil, 200, "")
	n.expect("GET", path+"/shortInfo", cu, nil, 403, "")
	n.expect("GET", path+"/shortInfo", other, nil, 403, "")
	n.expect("GET", path+"/shortInfo", sys, nil, 403, "")
	n.expect("GET", unknown+"/shortInfo", ta, nil, 404, notFound)

	// By title.
	var got engine.Customer
	n.decode(n.expect("GET", "/api/tenant/customers?customerTitle="+url.QueryEscape("Acme & Söhne"), ta, nil, 200, ""), &got)
	if got.ID != acme.ID {
		t.Fatalf("by title: %+v", got)
	}
	n.expect("GET", "/api/tenant/customers?customerTitle=nobody", ta, nil, 404, "Customer with title [nobody] is not found")
	n.expect("GET", "/api/tenant/customers?customerTitle=", ta, nil, 404, "Customer with title [] is not found")
	n.expect("GET", "/api/tenant/customers?customerTitle="+url.QueryEscape("Acme & Söhne"), other, nil, 404, "")
	n.expect("GET", "/api/tenant/customers", ta, nil, 400, "Required request parameter 'customerTitle' for method parameter type String is not present")
	n.expect("GET", "/api/tenant/customers?customerTitle=x", cu, nil, 403, "")
	n.expect("GET", "/api/tenant/customers?customerTitle=x", sys, nil, 403, "")
	// /api/tenant/{tenantId} still serves the tenant.
	n.expect("GET", "/api/tenant/"+n.Demo.DemoTenantID.String(), ta, nil, 200, "")

	// Customers by id: ThingsBoard's checkCustomerId text.
	n.expect("GET", unknown, ta, nil, 404, notFound)
	n.expect("DELETE", unknown, ta, nil, 404, notFound)
	n.expect("POST", "/api/customer", ta, map[string]any{"id": map[string]string{"entityType": "CUSTOMER", "id": unknownID}, "title": "ghost"}, 404, notFound)
	n.expect("GET", unknown+"/devices?pageSize=10&page=0", ta, nil, 404, notFound)
	n.expect("GET", unknown+"/deviceInfos?pageSize=10&page=0", ta, nil, 404, notFound)
	n.expect("GET", unknown+"/users?pageSize=10&page=0", ta, nil, 404, notFound)
	n.expect("POST", unknown+"/device/"+n.Demo.DemoDeviceID.String(), ta, nil, 404, notFound)
}

func TestCustomerNameConflictPolicy(t *testing.T) {
	n := startTestNode(t)
	ta := n.tenant()
	n.expect("POST", "/api/customer", ta, map[string]string{"title": "Acme"}, 200, "")
	n.expect("POST", "/api/customer", ta, map[string]string{"title": "Acme"}, 400, "Customer with such title already exists!")
	n.expect("POST", "/api/customer?nameConflictPolicy=FAIL", ta, map[string]string{"title": "Acme"}, 400, "Customer with such title already exists!")
	var c engine.Customer
	n.decode(n.expect("POST", "/api/customer?nameConflictPolicy=UNIQUIFY&uniquifyStrategy=INCREMENTAL", ta, map[string]string{"title": "Acme"}, 200, ""), &c)
	if c.Title != "Acme_1" {
		t.Fatalf("incremental: %+v", c)
	}
	n.decode(n.expect("POST", "/api/customer?nameConflictPolicy=UNIQUIFY&uniquifyStrategy=INCREMENTAL&uniquifySeparator=-", ta, map[string]string{"title": "Acme"}, 200, ""), &c)
	if c.Title != "Acme-1" {
		t.Fatalf("separator: %+v", c)
	}
	n.decode(n.expect("POST", "/api/customer?nameConflictPolicy=UNIQUIFY", ta, map[string]string{"title": "Acme"}, 200, ""), &c)
	if len(c.Title) != len("Acme_")+6 || !strings.HasPrefix(c.Title, "Acme_") {
		t.Fatalf("random: %+v", c)
	}
	n.expect("POST", "/api/customer?nameConflictPolicy=MAYBE", ta, map[string]string{"title": "x"}, 400, "Invalid nameConflictPolicy: MAYBE (expected FAIL or UNIQUIFY)")
	n.expect("POST", "/api/customer?nameConflictPolicy=UNIQUIFY&uniquifyStrategy=SOMETIMES", ta, map[string]string{"title": "x"}, 400, "Invalid uniquifyStrategy: SOMETIMES (expected RANDOM or INCREMENTAL)")
	n.expect("POST", "/api/customer?nameConflictPolicy=UNIQUIFY", n.customer(), map[string]string{"title": "Acme"}, 403, "")
}

func TestDeviceCompatAnswers(t *testing.T) {
	n := startTestNode(t)
	ta, cu := n.tenant(), n.customer()
	demo := n.Demo.DemoDeviceID.String()
	cust := n.Demo.DemoCustomerID.String()
	unknownID := uuid.NewString()
	notFound := "Device with id [" + unknownID + "] is not found"

	// 404s by id.
	n.expect("GET", "/api/device/"+unknownID, ta, nil, 404, notFound)
	n.expect("GET", "/api/device/info/"+unknownID, ta, nil, 404, notFound)
	n.expect("DELETE", "/api/device/"+unknownID, ta, nil, 404, notFound)
	n.expect("GET", "/api/device/"+unknownID+"/credentials", ta, nil, 404, notFound)
	n.expect("POST", "/api/device", ta, map[string]any{"id": map[string]string{"entityType": "DEVICE", "id": unknownID}, "name": "ghost"}, 404, notFound)
	n.expect("POST", "/api/customer/"+cust+"/device/"+unknownID, ta, nil, 404, notFound)
	n.expect("DELETE", "/api/customer/device/"+unknownID, ta, nil, 404, notFound)
	n.expect("GET", "/api/tenant/devices?deviceName=nope", ta, nil, 404, "Requested item wasn't found!")
	n.expect("GET", "/api/tenant/device?deviceName=nope", ta, nil, 404, "Requested item wasn't found!")

	// Public customers.
	const public = "Public customers are not supported: Sluice has no public customer to assign a device to"
	n.expect("POST", "/api/customer/public/device/"+demo, ta, nil, 400, public)
	n.expect("POST", "/api/customer/public/device/"+demo, cu, nil, 403, "")
	n.expect("POST", "/api/customer/public/device/"+unknownID, ta, nil, 404, notFound)
	n.expect("POST", "/api/customer/public/device/nope", ta, nil, 400, "Invalid UUID string: nope")

	// Assigning to the customer a device already has changes nothing.
	var d, again engine.Device
	n.decode(n.expect("POST", "/api/customer/"+cust+"/device/"+demo, ta, nil, 200, ""), &d)
	n.decode(n.expect("POST", "/api/customer/"+cust+"/device/"+demo, ta, nil, 200, ""), &again)
	if again.Version != d.Version || again.CustomerID.ID != n.Demo.DemoCustomerID {
		t.Fatalf("assigned again: version %d, was %d", again.Version, d.Version)
	}

	// A taken token.
	const taken = "Device credentials are already assigned to another device!"
	n.expect("POST", "/api/device?accessToken="+engine.DemoDeviceToken, ta, map[string]string{"name": "dup"}, 400, taken)
	var creds engine.DeviceCredentials
	n.decode(n.expect("GET", "/api/device/"+demo+"/credentials", ta, nil, 200, ""), &creds)
	creds.CredentialsID = engine.DemoCustomerDeviceToken
	n.expect("POST", "/api/device/credentials", ta, creds, 400, taken)
	body := map[string]any{"device": map[string]string{"name": "with-creds"},
		"credentials": map[string]string{"credentialsType": "ACCESS_TOKEN", "credentialsId": engine.DemoDeviceToken}}
	n.expect("POST", "/api/device-with-credentials", ta, body, 400, taken)

	// deviceIds: an empty element is 400, as checkArrayParameter answers.
	const empty = "Parameter 'deviceIds' can't be empty!"
	for _, q := range []string{demo + ",," + demo, demo + ",", "," + demo, demo + ",%20", "", ","} {
		n.expect("GET", "/api/devices?deviceIds="+q, ta, nil, 400, empty)
	}
	n.expect("GET", "/api/devices?deviceIds="+demo+"&deviceIds=", ta, nil, 400, empty)
	var devs []engine.Device
	n.decode(n.expect("GET", "/api/devices?deviceIds="+demo+"&deviceIds="+uuid.NewString(), ta, nil, 200, ""), &devs)
	if len(devs) != 1 {
		t.Fatalf("by ids: %+v", devs)
	}
	// The Set<UUID> reads leave an empty element out, as ThingsBoard's.
	var custs []engine.Customer
	n.decode(n.expect("GET", "/api/customers?customerIds="+cust+",,"+uuid.NewString(), ta, nil, 200, ""), &custs)
	if len(custs) != 1 {
		t.Fatalf("customers by ids: %+v", custs)
	}
}

func TestDeviceListsPagingAndFilters(t *testing.T) {
	n := startTestNode(t)
	ta := n.tenant()
	var zeta engine.Customer
	n.decode(n.expect("POST", "/api/customer", ta, map[string]string{"title": "Zeta Corp"}, 200, ""), &zeta)
	var pump engine.Device
	n.decode(n.expect("POST", "/api/device", ta, map[string]any{"name": "p1", "type": "pump", "customerId": zeta.ID}, 200, ""), &pump)
	n.expect("POST", "/api/device", ta, map[string]any{"name": "m1", "type": "WaterMeter"}, 200, "")

	type page struct {
		Data []struct {
			Name string `json:"name"`
		} `json:"data"`
		TotalElements int `json:"totalElements"`
	}
	get := func(path string) page {
		t.Helper()
		var p page
		n.decode(n.expect("GET", path, ta, nil, 200, ""), &p)
		return p
	}
	names := func(p page) string {
		var out []string
		for _, d := range p.Data {
			out = append(out, d.Name)
		}
		return strings.Join(out, ",")
	}
	all := get("/api/tenant/deviceInfos?pageSize=100&page=0").TotalElements

	// textSearch of device infos: name, label, type, customer title.
	if got := names(get("/api/tenant/deviceInfos?pageSize=10&page=0&textSearch=corp")); got != "p1" {
		t.Errorf("infos by customer title: %s", got)
	}
	if got := names(get("/api/tenant/deviceInfos?pageSize=10&page=0&textSearch=waterm")); got != "m1" {
		t.Errorf("infos by type: %s", got)
	}
	if got := names(get("/api/customer/" + zeta.ID.ID.String() + "/deviceInfos?pageSize=10&page=0&textSearch=ZETA")); got != "p1" {
		t.Errorf("customer infos by customer title: %s", got)
	}
	if got := get("/api/tenant/devices?pageSize=10&page=0&textSearch=corp").TotalElements; got != 0 {
		t.Errorf("plain list by customer title: %d", got)
	}

	// A blank type is no filter; with a type, deviceProfileId is ignored.
	if got := get("/api/tenant/deviceInfos?pageSize=100&page=0&type=%20").TotalElements; got != all {
		t.Errorf("blank type: %d of %d", got, all)
	}
	if got := get("/api/tenant/devices?pageSize=100&page=0&type=%20").TotalElements; got != all {
		t.Errorf("devices, blank type: %d of %d", got, all)
	}
	if got := names(get("/api/tenant/deviceInfos?pageSize=10&page=0&type=WaterMeter&deviceProfileId=" + pump.DeviceProfileID.ID.String())); got != "m1" {
		t.Errorf("type and profile: %s", got)
	}
	if got := names(get("/api/tenant/deviceInfos?pageSize=10&page=0&type=WaterMeter&deviceProfileId=not-a-uuid")); got != "m1" {
		t.Errorf("type and a bad profile id: %s", got)
	}
	if got := names(get("/api/tenant/deviceInfos?pageSize=10&page=0&type=%20&deviceProfileId=" + pump.DeviceProfileID.ID.String())); got != "p1" {
		t.Errorf("blank type and profile: %s", got)
	}
	n.expect("GET", "/api/tenant/deviceInfos?pageSize=10&page=0&type=%20&deviceProfileId=x", ta, nil, 400, "Invalid UUID string: x")
	if got := get("/api/customer/" + zeta.ID.ID.String() + "/devices?pageSize=10&page=0&type=%20").TotalElements; got != 1 {
		t.Errorf("customer devices, blank type: %d", got)
	}

	// Page links.
	for _, c := range []struct{ query, msg string }{
		{"pageSize=0&page=0", "Incorrect page link page size '0'. Page size must be greater than zero."},
		{"pageSize=10&page=-1", "Incorrect page link page '-1'. Page must be positive integer."},
		{"pageSize=10&page=0&sortProperty=name&sortOrder=up", "Unsupported sort order 'up'! Only 'ASC' or 'DESC' types are allowed."},
		{"pageSize=10&page=0&sortProperty=na%20me", "Invalid sort property"},
		{"pageSize=10&page=0&sortProperty=nosuch", "Invalid sort property: nosuch"},
	} {
		for _, list := range []string{"/api/tenant/devices", "/api/tenant/deviceInfos", "/api/customers", "/api/customer/" + zeta.ID.ID.String() + "/deviceInfos"} {
			n.expect("GET", list+"?"+c.query, ta, nil, 400, c.msg)
		}
	}
	for _, list := range []string{"/api/tenant/devices", "/api/tenant/deviceInfos", "/api/customers", "/api/deviceProfiles", "/api/users"} {
		get(list + "?pageSize=10&page=0&sortOrder=up") // ignored without a sortProperty
		get(list + "?pageSize=10&page=0&sortProperty=id&sortOrder=DESC")
	}
}
