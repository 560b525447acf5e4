package apitest

import (
	"encoding/json"
	"strings"
	"testing"
)

// createProfile saves a device profile with a provisioning strategy and returns its id.
func (n *testNode) createProfile(auth, name, provisionType, key, secret string) string {
	n.t.Helper()
	var dp struct{ ID entityID }
	body := `{"name":"` + name + `","provisionType":"` + provisionType + `","provisionDeviceKey":"` + key + `",` +
		`"profileData":{"provisionConfiguration":{"type":"` + provisionType + `","provisionDeviceSecret":"` + secret + `"}}}`
	n.must(200, "POST", "/api/deviceProfile", body, auth).JSON(n.t, &dp)
	return dp.ID.ID
}

// provisionResult is the answer of POST /api/v1/provision.
type provisionResult struct {
	CredentialsValue string `json:"credentialsValue"`
	CredentialsType  string `json:"credentialsType"`
	Status           string `json:"status"`
	ErrorMsg         string `json:"errorMsg"`
}

func (n *testNode) provision(body string) (provisionResult, string) {
	n.t.Helper()
	r := n.must(200, "POST", "/api/v1/provision", body)
	var res provisionResult
	r.JSON(n.t, &res)
	return res, string(r.Body)
}

const (
	provNotFound = `{"errorMsg":"Provision data was not found!","status":"NOT_FOUND"}`
	provFailure  = `{"errorMsg":"Failed to provision device!","status":"FAILURE"}`
)

func TestProvisionOutcomes(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	createID := n.createProfile(auth, "prov-create", "ALLOW_CREATE_NEW_DEVICES", "create-key", "create-secret")
	preID := n.createProfile(auth, "prov-pre", "CHECK_PRE_PROVISIONED_DEVICES", "pre-key", "pre-secret")
	n.createProfile(auth, "prov-off", "DISABLED", "off-key", "off-secret")

	// The key is unique across profiles.
	r := n.do("POST", "/api/deviceProfile", `{"name":"prov-dup","provisionType":"ALLOW_CREATE_NEW_DEVICES","provisionDeviceKey":"create-key"}`, auth)
	if msg := errorBody(t, r, 400); !strings.Contains(msg, "provision device key") {
		t.Fatalf("duplicate key: %s", msg)
	}

	f := func(body, want string) {
		t.Helper()
		if _, got := n.provision(body); got != want {
			t.Fatalf("provision %s:\n got %s\nwant %s", body, got, want)
		}
	}
	const create = `"provisionDeviceKey":"create-key","provisionDeviceSecret":"create-secret"`
	const pre = `"provisionDeviceKey":"pre-key","provisionDeviceSecret":"pre-secret"`
	f(`{"deviceName":"a","provisionDeviceKey":"create-key","provisionDeviceSecret":"wrong"}`, provNotFound)
	f(`{"deviceName":"a","provisionDeviceKey":"no-such-key","provisionDeviceSecret":"create-secret"}`, provNotFound)
	f(`{"deviceName":"a","provisionDeviceKey":"create-key","provisionDeviceSecret":""}`, provNotFound)
	f(`{"deviceName":"a","provisionDeviceKey":"","provisionDeviceSecret":"create-secret"}`, provNotFound)
	// A missing field is named, as ThingsBoard names it (its 500; Sluice's 400 for a wrong shape).
	for body, field := range map[string]string{
		`{"deviceName":"a","provisionDeviceKey":"create-key"}`:                                 "provisionDeviceSecret",
		`{"deviceName":"a","provisionDeviceSecret":"create-secret"}`:                           "provisionDeviceKey",
		`{"deviceName":"a","provisionDeviceKey":null,"provisionDeviceSecret":"create-secret"}`: "provisionDeviceKey",
		`null`: "provisionDeviceKey",
		`{}`:   "provisionDeviceKey",
	} {
		if msg := errorBody(t, n.do("POST", "/api/v1/provision", body), 400); msg != "Failed to find the field "+field+" in JSON body!" {
			t.Fatalf("provision %s: %q", body, msg)
		}
	}
	f(`{"deviceName":"a","provisionDeviceKey":"off-key","provisionDeviceSecret":"off-secret"}`, provNotFound)
	f(`{"deviceName":"  ",`+create+`}`, provFailure)
	f(`{"deviceName":"a","token":"`+n.Token+`",`+create+`}`, provFailure) // token taken
	f(`{"deviceName":"a","token":"has space",`+create+`}`, provFailure)   // token unfit for a URL
	f(`{"deviceName":"pre-missing",`+pre+`}`, provFailure)
	f(`{`+pre+`}`, provFailure)
	f(`{"deviceName":"",`+pre+`}`, provFailure)

	res, _ := n.provision(`{"deviceName":"a","credentialsType":"MQTT_BASIC",` + create + `}`)
	if res.Status != "FAILURE" || !strings.Contains(res.ErrorMsg, "ACCESS_TOKEN credentials only") {
		t.Fatalf("MQTT_BASIC: %+v", res)
	}
	errorBody(t, n.do("POST", "/api/v1/provision", `{"provisionDeviceKey":`), 400)
	errorBody(t, n.do("POST", "/api/v1/provision", `{"provisionDeviceKey":1}`), 400)

	// ALLOW_CREATE_NEW_DEVICES creates the device with the token asked for.
	f(`{"deviceName":" sensor-1 ","token":"prov-token-1","gateway":true,"credentialsType":"ACCESS_TOKEN",`+create+`}`,
		`{"credentialsValue":"prov-token-1","credentialsType":"ACCESS_TOKEN","status":"SUCCESS"}`)
	var dev struct {
		ID              entityID
		Type            string
		DeviceProfileID entityID
		AdditionalInfo  json.RawMessage
	}
	n.must(200, "GET", "/api/tenant/device?deviceName=sensor-1", "", auth).JSON(t, &dev)
	if dev.Type != "prov-create" || dev.DeviceProfileID.ID != createID || compactJSON(t, dev.AdditionalInfo) != `{"gateway":true}` {
		t.Fatalf("provisioned device: %+v", dev)
	}
	n.checkProvisioned(auth, dev.ID.ID)
	n.must(200, "POST", "/api/v1/prov-token-1/telemetry", `{"temperature":21}`)
	if got := n.latestStrict(auth, dev.ID.ID, "temperature"); !strings.Contains(got, `"value":21}`) {
		t.Fatalf("telemetry of the provisioned device: %s", got)
	}
	f(`{"deviceName":"sensor-1",`+create+`}`, provFailure) // name taken

	// Read as ThingsBoard's Gson reads it: a number where a string is expected
	// is its text, "true" a true flag.
	f(`{"deviceName":1234,"token":5678,"gateway":"TRUE",`+create+`}`,
		`{"credentialsValue":"5678","credentialsType":"ACCESS_TOKEN","status":"SUCCESS"}`)
	n.must(200, "GET", "/api/tenant/device?deviceName=1234", "", auth).JSON(t, &dev)
	if compactJSON(t, dev.AdditionalInfo) != `{"gateway":true}` {
		t.Fatalf("provisioned with a numeric name and a string flag: %+v", dev)
	}
	errorBody(t, n.do("POST", "/api/v1/provision", `{"deviceName":{},`+create+`}`), 400)

	// Without a name or token both are generated; an empty name is none (as
	// ThingsBoard, whose request reads an absent name as "").
	for _, body := range []string{`{` + create + `}`, `{"deviceName":"",` + create + `}`} {
		res, _ = n.provision(body)
		if res.Status != "SUCCESS" || len(res.CredentialsValue) != 20 {
			t.Fatalf("generated for %s: %+v", body, res)
		}
		n.must(200, "POST", "/api/v1/"+res.CredentialsValue+"/telemetry", `{"t":1}`)
	}

	// CHECK_PRE_PROVISIONED_DEVICES hands out the existing token once.
	var pd struct{ ID entityID }
	n.must(200, "POST", "/api/device", `{"name":"pre-1","deviceProfileId":{"entityType":"DEVICE_PROFILE","id":"`+preID+`"}}`, auth).JSON(t, &pd)
	var cred struct{ CredentialsID string }
	n.must(200, "GET", "/api/device/"+pd.ID.ID+"/credentials", "", auth).JSON(t, &cred)
	// credentialsType is not read for a pre-provisioned device (ThingsBoard's
	// processProvision): its own token whatever it asks.
	f(`{"deviceName":"pre-1","token":"ignored","credentialsType":"MQTT_BASIC",`+pre+`}`,
		`{"credentialsValue":"`+cred.CredentialsID+`","credentialsType":"ACCESS_TOKEN","status":"SUCCESS"}`)
	n.checkProvisioned(auth, pd.ID.ID)
	n.must(200, "POST", "/api/v1/"+cred.CredentialsID+"/telemetry", `{"t":1}`)
	f(`{"deviceName":"pre-1",`+pre+`}`, provFailure) // already provisioned
	n.createDevice(auth, "pre-other")                // exists, but in another profile
	f(`{"deviceName":"pre-other",`+pre+`}`, provFailure)

	// Any provisionState already set is a FAILURE, not only "provisioned".
	n.must(200, "POST", "/api/device", `{"name":"pre-pending","deviceProfileId":{"entityType":"DEVICE_PROFILE","id":"`+preID+`"}}`, auth).JSON(t, &pd)
	n.must(200, "POST", "/api/plugins/telemetry/DEVICE/"+pd.ID.ID+"/attributes/SERVER_SCOPE", `{"provisionState":"pending"}`, auth)
	f(`{"deviceName":"pre-pending",`+pre+`}`, provFailure)
}

// TestProvisionX509Configuration: the X509_CERTIFICATE_CHAIN settings of a
// profile are kept through a save and a read, and a save of what was read.
func TestProvisionX509Configuration(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	const conf = `{"type":"X509_CERTIFICATE_CHAIN","provisionDeviceSecret":null,"allowCreateNewDevicesByX509Certificate":true,"certificateRegExPattern":"(.*)"}`
	var dp map[string]any
	n.must(200, "POST", "/api/deviceProfile", `{"name":"x509","provisionType":"X509_CERTIFICATE_CHAIN","profileData":{"provisionConfiguration":`+conf+`}}`, auth).JSON(t, &dp)
	id := dp["id"].(map[string]any)["id"].(string)
	check := func(what string) {
		t.Helper()
		var got struct {
			ProfileData struct{ ProvisionConfiguration json.RawMessage }
		}
		n.must(200, "GET", "/api/deviceProfile/"+id, "", auth).JSON(t, &got)
		if c := compactJSON(t, got.ProfileData.ProvisionConfiguration); c != conf {
			t.Fatalf("%s: %s\nwant %s", what, c, conf)
		}
	}
	check("saved")
	r := n.must(200, "GET", "/api/deviceProfile/"+id, "", auth)
	n.must(200, "POST", "/api/deviceProfile", string(r.Body), auth)
	check("saved back")
}

// checkProvisioned fails unless the device has provisionState=provisioned.
func (n *testNode) checkProvisioned(auth, deviceID string) {
	n.t.Helper()
	r := n.must(200, "GET", "/api/plugins/telemetry/DEVICE/"+deviceID+"/values/attributes/SERVER_SCOPE?keys=provisionState", "", auth)
	if !strings.Contains(string(r.Body), `"key":"provisionState","value":"provisioned"`) {
		n.t.Fatalf("provisionState of %s: %s", deviceID, r.Body)
	}
}
