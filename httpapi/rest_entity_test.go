package httpapi

import (
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/engine"
)

func TestDeviceRoutes(t *testing.T) {
	n := startTestNode(t)
	ta, cu, sys := n.tenant(), n.customer(), n.sysadmin()
	_, other := n.otherTenant("B")
	demo := "/api/device/" + n.Demo.DemoDeviceID.String()
	custDev := "/api/device/" + n.Demo.CustomerDeviceID.String()
	unknown := "/api/device/" + uuid.NewString()

	// Create.
	var d engine.Device
	n.decode(n.expect("POST", "/api/device?accessToken=MY_TOKEN", ta, map[string]string{"name": "d1", "type": "thermometer"}, 200, ""), &d)
	if d.ID.EntityType != "DEVICE" || d.Type != "thermometer" || d.Name != "d1" || d.Tenant.ID != n.Demo.DemoTenantID {
		t.Fatalf("created: %+v", d)
	}
	path := "/api/device/" + d.ID.ID.String()
	n.expect("POST", "/api/device", ta, map[string]string{"name": "d1"}, 400, "Device with such name already exists!")
	n.expect("POST", "/api/device?accessToken=MY_TOKEN", ta, map[string]string{"name": "d2"}, 400, "Device credentials are already assigned to another device!")
	n.expect("POST", "/api/device", ta, map[string]string{"name": ""}, 400, "Device name should be specified!")
	n.expect("POST", "/api/device", ta, "{bad json", 400, "Invalid request body")
	n.expect("POST", "/api/device", cu, map[string]string{"name": "d3"}, 403, "")
	n.expect("POST", "/api/device", sys, map[string]string{"name": "d3"}, 403, "")
	n.expect("POST", "/api/device", "", map[string]string{"name": "d3"}, 401, "Authentication failed")
	n.expect("POST", "/api/device", other, map[string]string{"name": "d1"}, 200, "") // names are per tenant

	// Update through the same path keeps the token.
	d.Label = "hall"
	var up engine.Device
	n.decode(n.expect("POST", "/api/device", ta, d, 200, ""), &up)
	if up.Label != "hall" || up.ID != d.ID || up.Version != 2 {
		t.Fatalf("updated: %+v", up)
	}
	n.expect("POST", "/api/device", other, d, 403, "")

	// Read.
	n.expect("GET", path, ta, nil, 200, "")
	n.expect("GET", custDev, cu, nil, 200, "")
	n.expect("GET", demo, cu, nil, 403, "You don't have permission to perform this operation!")
	n.expect("GET", demo, other, nil, 403, "")
	n.expect("GET", demo, sys, nil, 403, "")
	n.expect("GET", unknown, ta, nil, 404, "Device with id ["+strings.TrimPrefix(unknown, "/api/device/")+"] is not found")
	n.expect("GET", "/api/device/not-a-uuid", ta, nil, 400, "Invalid UUID string: not-a-uuid")
	n.expect("GET", demo, "", nil, 401, "")

	// Credentials.
	var creds engine.DeviceCredentials
	n.decode(n.expect("GET", path+"/credentials", ta, nil, 200, ""), &creds)
	if creds.CredentialsID != "MY_TOKEN" || creds.CredentialsType != "ACCESS_TOKEN" || creds.CredentialsValue != nil || creds.DeviceID != d.ID {
		t.Fatalf("credentials: %+v", creds)
	}
	n.expect("GET", custDev+"/credentials", cu, nil, 200, "")
	n.expect("GET", path+"/credentials", other, nil, 403, "")
	n.expect("GET", unknown+"/credentials", ta, nil, 404, "")
	n.expect("GET", "/api/device/x/credentials", ta, nil, 400, "Invalid UUID string: x")

	// Changing the token refuses the old one on the device API at once.
	n.expect("POST", "/api/v1/MY_TOKEN/telemetry", "", `{"t":1}`, 200, "")
	creds.CredentialsID = "MY_NEW_TOKEN"
	n.decode(n.expect("POST", "/api/device/credentials", ta, creds, 200, ""), &creds)
	if creds.CredentialsID != "MY_NEW_TOKEN" {
		t.Fatalf("credentials: %+v", creds)
	}
	n.expect("POST", "/api/v1/MY_TOKEN/telemetry", "", `{"t":1}`, 401, "")
	n.expect("POST", "/api/v1/MY_NEW_TOKEN/telemetry", "", `{"t":2}`, 200, "")
	creds.CredentialsID = engine.DemoDeviceToken
	n.expect("POST", "/api/device/credentials", ta, creds, 400, "Device credentials are already assigned to another device!")
	n.expect("POST", "/api/device/credentials", cu, creds, 403, "")
	n.expect("POST", "/api/device/credentials", other, creds, 403, "")
	n.expect("POST", "/api/device/credentials", ta, "nope", 400, "")
	bad := creds
	bad.CredentialsID = "a\u0001b"
	n.expect("POST", "/api/device/credentials", ta, bad, 400, "credentialsId must not contain control characters!")
	bad.CredentialsID = ".."
	n.expect("POST", "/api/device/credentials", ta, bad, 400, "Access token must not be '.' or '..'")
	bad.DeviceID.ID = uuid.New()
	n.expect("POST", "/api/device/credentials", ta, bad, 404, "Device with id ["+bad.DeviceID.ID.String()+"] is not found")

	// Delete.
	n.expect("DELETE", path, cu, nil, 403, "")
	n.expect("DELETE", path, other, nil, 403, "")
	n.expect("DELETE", "/api/device/zzz", ta, nil, 400, "Invalid UUID string: zzz")
	if out := n.expect("DELETE", path, ta, nil, 200, ""); len(out) != 0 {
		t.Errorf("delete body: %s", out)
	}
	n.expect("DELETE", path, ta, nil, 404, "")
	n.expect("GET", path, ta, nil, 404, "")
	n.expect("POST", "/api/v1/MY_NEW_TOKEN/telemetry", "", `{"t":3}`, 401, "")
}

func TestTenantDeviceLists(t *testing.T) {
	n := startTestNode(t)
	ta, cu := n.tenant(), n.customer()
	_, other := n.otherTenant("B")
	for _, name := range []string{"alpha", "Beta", "gamma"} {
		n.expect("POST", "/api/device", ta, map[string]string{"name": name}, 200, "")
	}

	var page engine.PageData[engine.Device]
	n.decode(n.expect("GET", "/api/tenant/devices?pageSize=2&page=0", ta, nil, 200, ""), &page)
	if len(page.Data) != 2 || page.TotalElements != 5 || page.TotalPages != 3 || !page.HasNext {
		t.Fatalf("page: %+v", page)
	}
	raw := string(n.expect("GET", "/api/tenant/devices?pageSize=10&page=0&textSearch=A&sortProperty=name&sortOrder=DESC", ta, nil, 200, ""))
	for _, k := range []string{`"data":[`, `"totalPages":1`, `"totalElements":3`, `"hasNext":false`} {
		if !strings.Contains(raw, k) {
			t.Errorf("page lacks %s: %s", k, raw)
		}
	}
	n.decode([]byte(raw), &page)
	var names []string
	for _, d := range page.Data {
		names = append(names, d.Name)
	}
	if strings.Join(names, ",") != "gamma,Beta,alpha" {
		t.Errorf("order: %v", names)
	}
	n.decode(n.expect("GET", "/api/tenant/devices?pageSize=10&page=0", other, nil, 200, ""), &page)
	if page.TotalElements != 0 || page.Data == nil {
		t.Errorf("other tenant sees %+v", page)
	}
	n.expect("GET", "/api/tenant/devices?page=0", ta, nil, 400, "Required request parameter 'pageSize' for method parameter type int is not present")
	n.expect("GET", "/api/tenant/devices?pageSize=x&page=0", ta, nil, 400, "")
	n.expect("GET", "/api/tenant/devices?pageSize=0&page=0", ta, nil, 400, "")
	n.expect("GET", "/api/tenant/devices?pageSize=1&page=0&sortProperty=bogus", ta, nil, 400, "")
	n.expect("GET", "/api/tenant/devices?pageSize=1&page=0", cu, nil, 403, "")
	n.expect("GET", "/api/tenant/devices?pageSize=1&page=0", "", nil, 401, "")

	q := "?deviceName=" + url.QueryEscape(engine.DemoDeviceName)
	var d engine.Device
	n.decode(n.expect("GET", "/api/tenant/devices"+q, ta, nil, 200, ""), &d)
	if d.ID.ID != n.Demo.DemoDeviceID {
		t.Fatalf("by name: %+v", d)
	}
	n.decode(n.expect("GET", "/api/tenant/device"+q, ta, nil, 200, ""), &d)
	if d.ID.ID != n.Demo.DemoDeviceID {
		t.Fatalf("by name: %+v", d)
	}
	n.expect("GET", "/api/tenant/devices?deviceName=nope", ta, nil, 404, "Requested item wasn't found!")
	n.expect("GET", "/api/tenant/device?deviceName=nope", ta, nil, 404, "")
	n.expect("GET", "/api/tenant/device"+q, other, nil, 404, "")
	n.expect("GET", "/api/tenant/device", ta, nil, 400, "")
	n.expect("GET", "/api/tenant/device"+q, cu, nil, 403, "")
}

func TestDeviceProfileRoutes(t *testing.T) {
	n := startTestNode(t)
	ta, cu := n.tenant(), n.customer()
	_, other := n.otherTenant("B")

	var info engine.DeviceProfileInfo
	n.decode(n.expect("GET", "/api/deviceProfileInfo/default", ta, nil, 200, ""), &info)
	if info.Name != "default" || info.ID.EntityType != "DEVICE_PROFILE" || info.Type != "DEFAULT" {
		t.Fatalf("info: %+v", info)
	}
	// Customer users read profile infos too, as ThingsBoard.
	n.expect("GET", "/api/deviceProfileInfo/default", cu, nil, 200, "")
	n.expect("GET", "/api/deviceProfileInfo/default", n.sysadmin(), nil, 403, "")

	var dp engine.DeviceProfile
	n.decode(n.expect("POST", "/api/deviceProfile", ta, map[string]string{"name": "meters"}, 200, ""), &dp)
	raw := string(n.expect("GET", "/api/deviceProfile/"+dp.ID.ID.String(), ta, nil, 200, ""))
	for _, k := range []string{`"provisionType":"DISABLED"`, `"provisionDeviceKey":null`, `"transportType":"DEFAULT"`, `"default":false`, `"profileData":{`} {
		if !strings.Contains(raw, k) {
			t.Errorf("profile lacks %s: %s", k, raw)
		}
	}
	n.expect("POST", "/api/deviceProfile", ta, map[string]string{"name": "meters"}, 400, "Device profile with such name already exists!")
	n.expect("POST", "/api/deviceProfile", cu, map[string]string{"name": "x"}, 403, "")
	n.expect("POST", "/api/deviceProfile", ta, "[", 400, "")
	n.expect("GET", "/api/deviceProfile/"+dp.ID.ID.String(), other, nil, 403, "")
	n.expect("GET", "/api/deviceProfile/"+uuid.NewString(), ta, nil, 404, "")
	n.expect("GET", "/api/deviceProfile/1", ta, nil, 400, "Invalid UUID string: 1")

	var page engine.PageData[engine.DeviceProfile]
	n.decode(n.expect("GET", "/api/deviceProfiles?pageSize=10&page=0&sortProperty=name", ta, nil, 200, ""), &page)
	if page.TotalElements != 2 || page.Data[0].Name != "default" || page.Data[1].Name != "meters" {
		t.Fatalf("profiles: %+v", page)
	}
	n.expect("GET", "/api/deviceProfiles?pageSize=10", ta, nil, 400, "")
	n.expect("DELETE", "/api/deviceProfile/"+info.ID.ID.String(), ta, nil, 400, "Deletion of Default Device Profile is prohibited!")
	n.expect("DELETE", "/api/deviceProfile/"+dp.ID.ID.String(), other, nil, 403, "")
	n.expect("DELETE", "/api/deviceProfile/"+dp.ID.ID.String(), ta, nil, 200, "")
	n.expect("DELETE", "/api/deviceProfile/"+dp.ID.ID.String(), ta, nil, 404, "")
}

func TestTenantCustomerUserRoutes(t *testing.T) {
	n := startTestNode(t)
	ta, cu, sys := n.tenant(), n.customer(), n.sysadmin()
	tenantB, other := n.otherTenant("B")
	demoTenant := "/api/tenant/" + n.Demo.DemoTenantID.String()

	// Tenants: system administrator only, a tenant admin may read its own.
	n.expect("POST", "/api/tenant", ta, map[string]string{"title": "C"}, 403, "")
	n.expect("POST", "/api/tenant", sys, map[string]string{"title": ""}, 400, "Tenant title should be specified!")
	n.expect("GET", demoTenant, sys, nil, 200, "")
	n.expect("GET", demoTenant, ta, nil, 200, "")
	n.expect("GET", demoTenant, other, nil, 403, "")
	n.expect("GET", demoTenant, cu, nil, 403, "")
	n.expect("GET", "/api/tenant/"+uuid.NewString(), sys, nil, 404, "")
	n.expect("GET", "/api/tenant/nope", sys, nil, 400, "Invalid UUID string: nope")
	var tenants engine.PageData[engine.Tenant]
	n.decode(n.expect("GET", "/api/tenants?pageSize=10&page=0&sortProperty=title", sys, nil, 200, ""), &tenants)
	if tenants.TotalElements != 2 || tenants.Data[0].Title != "B" || tenants.Data[1].Title != "Tenant" {
		t.Fatalf("tenants: %+v", tenants)
	}
	n.expect("GET", "/api/tenants?pageSize=10&page=0", ta, nil, 403, "")
	// A new tenant comes with its default profile.
	n.expect("GET", "/api/deviceProfileInfo/default", other, nil, 200, "")

	// Customers: tenant admins; a customer user may read its own.
	var c engine.Customer
	n.decode(n.expect("POST", "/api/customer", ta, map[string]string{"title": "Customer B"}, 200, ""), &c)
	if c.TenantID.ID != n.Demo.DemoTenantID || c.Name != "Customer B" {
		t.Fatalf("customer: %+v", c)
	}
	n.expect("POST", "/api/customer", ta, map[string]string{"title": "Customer B"}, 400, "Customer with such title already exists!")
	n.expect("POST", "/api/customer", other, map[string]string{"title": "Customer B"}, 200, "")
	n.expect("POST", "/api/customer", sys, map[string]string{"title": "x"}, 403, "")
	n.expect("POST", "/api/customer", cu, map[string]string{"title": "x"}, 403, "")
	own := "/api/customer/" + n.Demo.DemoCustomerID.String()
	n.expect("GET", own, ta, nil, 200, "")
	n.expect("GET", own, cu, nil, 200, "")
	n.expect("GET", "/api/customer/"+c.ID.ID.String(), cu, nil, 403, "")
	n.expect("GET", own, other, nil, 403, "")
	n.expect("GET", "/api/customer/"+uuid.NewString(), ta, nil, 404, "")
	n.expect("GET", "/api/customer/x", ta, nil, 400, "")
	var customers engine.PageData[engine.Customer]
	n.decode(n.expect("GET", "/api/customers?pageSize=10&page=0", ta, nil, 200, ""), &customers)
	if customers.TotalElements != 2 {
		t.Fatalf("customers: %+v", customers)
	}
	n.expect("GET", "/api/customers?pageSize=10&page=0", cu, nil, 403, "")

	// Users: within the caller's tenant and customers.
	var u engine.User
	n.decode(n.expect("POST", "/api/user?sendActivationMail=false", ta, map[string]any{
		"email": "new@example.com", "authority": "CUSTOMER_USER", "customerId": c.ID, "firstName": "New",
	}, 200, ""), &u)
	if u.TenantID.ID != n.Demo.DemoTenantID || u.CustomerID.ID != c.ID.ID || u.Authority != engine.CustomerUser {
		t.Fatalf("user: %+v", u)
	}
	n.expect("POST", "/api/auth/login", "", map[string]string{"username": "new@example.com", "password": ""}, 401, "")
	n.expect("POST", "/api/user", ta, map[string]any{"email": "new@example.com", "authority": "TENANT_ADMIN"}, 400, "")
	n.expect("POST", "/api/user", ta, map[string]any{"email": "bad", "authority": "TENANT_ADMIN"}, 400, "Invalid email address format 'bad'!")
	n.expect("POST", "/api/user", ta, map[string]any{"email": "s@example.com", "authority": "SYS_ADMIN"}, 403, "")
	n.expect("POST", "/api/user", other, map[string]any{"email": "x@example.com", "authority": "CUSTOMER_USER", "customerId": c.ID}, 403, "")
	n.expect("POST", "/api/user", cu, map[string]any{"email": "x@example.com", "authority": "CUSTOMER_USER"}, 403, "")
	n.expect("POST", "/api/user", sys, map[string]any{"email": "y@example.com", "authority": "TENANT_ADMIN", "tenantId": tenantB.ID}, 200, "")
	n.expect("POST", "/api/user", "", map[string]any{"email": "z@example.com"}, 401, "")
}

// TestDeviceProfileInfoRoutes: the short forms of profiles, by id and by page,
// and moving the default.
func TestDeviceProfileInfoRoutes(t *testing.T) {
	n := startTestNode(t)
	ta, cu := n.tenant(), n.customer()
	_, other := n.otherTenant("B")

	var def engine.DeviceProfileInfo
	n.decode(n.expect("GET", "/api/deviceProfileInfo/default", ta, nil, 200, ""), &def)
	var dp engine.DeviceProfile
	n.decode(n.expect("POST", "/api/deviceProfile", ta, map[string]string{"name": "mqtt meters", "transportType": "MQTT"}, 200, ""), &dp)
	id := dp.ID.ID.String()

	raw := n.expect("GET", "/api/deviceProfileInfo/"+id, cu, nil, 200, "")
	var info map[string]any
	n.decode(raw, &info)
	for _, k := range []string{"id", "tenantId", "name", "image", "defaultDashboardId", "type", "transportType"} {
		if _, ok := info[k]; !ok {
			t.Errorf("info lacks %s: %s", k, raw)
		}
	}
	if len(info) != 7 || info["name"] != "mqtt meters" || info["transportType"] != "MQTT" {
		t.Fatalf("info: %s", raw)
	}
	n.expect("GET", "/api/deviceProfileInfo/"+id, other, nil, 403, "")
	n.expect("GET", "/api/deviceProfileInfo/"+uuid.NewString(), ta, nil, 404, "")
	n.expect("GET", "/api/deviceProfileInfo/nope", ta, nil, 400, "Invalid UUID string: nope")

	var page engine.PageData[engine.DeviceProfileInfo]
	n.decode(n.expect("GET", "/api/deviceProfileInfos?pageSize=10&page=0&sortProperty=name&sortOrder=DESC", cu, nil, 200, ""), &page)
	if page.TotalElements != 2 || page.Data[0].Name != "mqtt meters" || page.Data[1].Name != "default" {
		t.Fatalf("infos: %+v", page)
	}
	n.decode(n.expect("GET", "/api/deviceProfileInfos?pageSize=10&page=0&transportType=MQTT", ta, nil, 200, ""), &page)
	if page.TotalElements != 1 || page.Data[0].ID != dp.ID {
		t.Fatalf("MQTT infos: %+v", page)
	}
	n.decode(n.expect("GET", "/api/deviceProfileInfos?pageSize=10&page=0&textSearch=METER", ta, nil, 200, ""), &page)
	if page.TotalElements != 1 {
		t.Fatalf("searched infos: %+v", page)
	}
	n.expect("GET", "/api/deviceProfileInfos?page=0", ta, nil, 400, "")
	n.expect("GET", "/api/deviceProfileInfos?pageSize=10&page=0", n.sysadmin(), nil, 403, "")

	// Moving the default.
	n.expect("POST", "/api/deviceProfile/"+id+"/default", cu, nil, 403, "")
	n.expect("POST", "/api/deviceProfile/"+id+"/default", other, nil, 403, "")
	n.expect("POST", "/api/deviceProfile/"+uuid.NewString()+"/default", ta, nil, 404, "")
	var got engine.DeviceProfile
	n.decode(n.expect("POST", "/api/deviceProfile/"+id+"/default", ta, nil, 200, ""), &got)
	if !got.Default || got.ID != dp.ID {
		t.Fatalf("set default: %+v", got)
	}
	var now engine.DeviceProfileInfo
	n.decode(n.expect("GET", "/api/deviceProfileInfo/default", ta, nil, 200, ""), &now)
	if now.ID != dp.ID {
		t.Fatalf("default after the change: %+v", now)
	}
	n.expect("POST", "/api/deviceProfile", ta, map[string]any{"name": "another", "default": true}, 400,
		"Another default device profile is present in scope of current tenant!")
	// The old default is an ordinary profile now (the demo devices use it).
	n.expect("DELETE", "/api/deviceProfile/"+def.ID.ID.String(), ta, nil, 400, "The device profile referenced by the devices cannot be deleted!")
}

// The device routes ThingsBoard clients use beside the plain lists: infos
// (with "active" from the device's requests), by ids, types, saving with
// credentials and the name conflict policy.
func TestDeviceInfoRoutes(t *testing.T) {
	n := startTestNode(t)
	ta, cu := n.tenant(), n.customer()
	_, other := n.otherTenant("B")
	demo := n.Demo.DemoDeviceID.String()

	var info map[string]any
	n.decode(n.expect("GET", "/api/device/info/"+demo, ta, nil, 200, ""), &info)
	if _, ok := info["customerTitle"]; info["name"] != engine.DemoDeviceName || !ok || info["deviceProfileName"] != "default" || info["customerIsPublic"] != false {
		t.Fatalf("info: %v", info)
	}
	n.expect("POST", "/api/v1/"+engine.DemoDeviceToken+"/telemetry", "", `{"t":1}`, 200, "")
	n.decode(n.expect("GET", "/api/device/info/"+demo, ta, nil, 200, ""), &info)
	if info["active"] != true {
		t.Fatalf("active after a request: %v", info)
	}
	n.expect("GET", "/api/device/info/"+demo, other, nil, 403, "")
	attrs := string(n.expect("GET", "/api/plugins/telemetry/DEVICE/"+demo+"/values/attributes/SERVER_SCOPE?keys=active", ta, nil, 200, ""))
	if !strings.Contains(attrs, `"key":"active","value":true`) {
		t.Fatalf("server attributes: %s", attrs)
	}

	var page engine.PageData[map[string]any]
	n.decode(n.expect("GET", "/api/tenant/deviceInfos?pageSize=10&page=0&active=true", ta, nil, 200, ""), &page)
	if len(page.Data) != 1 || page.Data[0]["name"] != engine.DemoDeviceName {
		t.Fatalf("active infos: %+v", page)
	}
	n.decode(n.expect("GET", "/api/tenant/deviceInfos?pageSize=10&page=0&active=false&type=default", ta, nil, 200, ""), &page)
	for _, d := range page.Data {
		if d["name"] == engine.DemoDeviceName || d["active"] != false {
			t.Fatalf("inactive infos: %+v", page)
		}
	}
	n.expect("GET", "/api/tenant/deviceInfos?pageSize=10&page=0&active=maybe", ta, nil, 400, "")
	n.expect("GET", "/api/tenant/deviceInfos?pageSize=10&page=0&deviceProfileId=x", ta, nil, 400, "")
	n.expect("GET", "/api/tenant/deviceInfos?pageSize=10&page=0", cu, nil, 403, "")
	n.expect("GET", "/api/tenant/deviceInfos?page=0", ta, nil, 400, "Required request parameter 'pageSize' for method parameter type int is not present")
	cust := n.Demo.DemoCustomerID.String()
	n.decode(n.expect("GET", "/api/customer/"+cust+"/deviceInfos?pageSize=10&page=0", cu, nil, 200, ""), &page)
	if page.TotalElements != 1 {
		t.Fatalf("customer infos: %+v", page)
	}
	n.expect("GET", "/api/customer/"+cust+"/deviceInfos?pageSize=10&page=0", other, nil, 403, "")

	var devs []engine.Device
	n.decode(n.expect("GET", "/api/devices?deviceIds="+demo+","+uuid.NewString(), ta, nil, 200, ""), &devs)
	if len(devs) != 1 || devs[0].ID.ID != n.Demo.DemoDeviceID {
		t.Fatalf("by ids: %+v", devs)
	}
	n.decode(n.expect("GET", "/api/devices?deviceIds="+demo, other, nil, 200, ""), &devs)
	if len(devs) != 0 {
		t.Fatalf("other tenant by ids: %+v", devs)
	}
	n.expect("GET", "/api/devices", ta, nil, 400, "Required request parameter 'deviceIds' for method parameter type String is not present")
	n.expect("GET", "/api/devices?deviceIds=nope", ta, nil, 400, "")

	types := string(n.expect("GET", "/api/device/types", ta, nil, 200, ""))
	if !strings.Contains(types, `"entityType":"DEVICE","type":"default"`) {
		t.Fatalf("types: %s", types)
	}

	body := map[string]any{"device": map[string]string{"name": engine.DemoDeviceName},
		"credentials": map[string]string{"credentialsType": "ACCESS_TOKEN", "credentialsId": "WITH_CREDS"}}
	n.expect("POST", "/api/device-with-credentials", ta, body, 400, "Device with such name already exists!")
	var d engine.Device
	n.decode(n.expect("POST", "/api/device-with-credentials?nameConflictPolicy=UNIQUIFY&uniquifyStrategy=INCREMENTAL", ta, body, 200, ""), &d)
	if d.Name != engine.DemoDeviceName+"_1" {
		t.Fatalf("uniquified: %+v", d)
	}
	n.expect("POST", "/api/v1/WITH_CREDS/telemetry", "", `{"t":1}`, 200, "")
	n.decode(n.expect("POST", "/api/device?nameConflictPolicy=UNIQUIFY&uniquifySeparator=-", ta, map[string]string{"name": d.Name}, 200, ""), &d)
	if !strings.HasPrefix(d.Name, engine.DemoDeviceName+"_1-") {
		t.Fatalf("random suffix: %+v", d)
	}
	n.expect("POST", "/api/device?nameConflictPolicy=MAYBE", ta, map[string]string{"name": "x"}, 400, "Invalid nameConflictPolicy: MAYBE (expected FAIL or UNIQUIFY)")
	n.expect("POST", "/api/device-with-credentials", ta, map[string]any{"device": map[string]string{"name": "y"}}, 400, "Validation error: credentials must not be null")
}

// TestPercentEncodedPath: path segments are decoded after routing, as Spring
// decodes a @PathVariable, so a token a client must encode still works.
func TestPercentEncodedPath(t *testing.T) {
	n := startTestNode(t)
	ta := n.tenant()
	n.expect("POST", "/api/device?accessToken="+url.QueryEscape("tök|en"), ta, map[string]string{"name": "encoded"}, 200, "")
	n.expect("POST", "/api/v1/t%C3%B6k%7Cen/telemetry", "", `{"a":1}`, 200, "")
	n.expect("POST", "/api/v1/DHT11%5FDEMO_TOKEN/telemetry", "", `{"a":1}`, 200, "")
	n.expect("POST", "/api/v1/t%C3%B6k%7Cen%2Fx/telemetry", "", `{"a":1}`, 401, "") // an encoded slash stays in the token
	n.expect("GET", "/api/device/"+strings.Replace(n.Demo.DemoDeviceID.String(), "-", "%2D", 1), ta, nil, 200, "")
}
