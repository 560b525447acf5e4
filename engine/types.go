package engine

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"
)

// NullUUID is ThingsBoard's stand-in for "no id": the customerId of an unassigned
// device or of a tenant admin, and the tenantId of the system administrator.
var NullUUID = uuid.MustParse("13814000-1dd2-11b2-8080-808080808080")

// Entity types as they appear in ids on the wire.
const (
	EntityTenant        = "TENANT"
	EntityCustomer      = "CUSTOMER"
	EntityUser          = "USER"
	EntityDevice        = "DEVICE"
	EntityDeviceProfile = "DEVICE_PROFILE"
	EntityAPIKey        = "API_KEY"
)

// Authorities of users (compat §7.5); RefreshScope marks refresh tokens.
const (
	SysAdmin     = "SYS_ADMIN"
	TenantAdmin  = "TENANT_ADMIN"
	CustomerUser = "CUSTOMER_USER"
	RefreshScope = "REFRESH_TOKEN"
)

// CredentialsAccessToken is the only device credentials type Sluice supports so far.
const CredentialsAccessToken = "ACCESS_TOKEN"

// EntityID is a typed id as ThingsBoard writes it: {"entityType":"DEVICE","id":"<uuid>"}.
// A zero ID means "not given" in request bodies.
type EntityID struct {
	EntityType string    `json:"entityType"`
	ID         uuid.UUID `json:"id"`
}

func newEntityID(entityType string, id uuid.UUID) EntityID {
	return EntityID{EntityType: entityType, ID: id}
}

// orNull maps "not given" to NullUUID, so stored records never hold uuid.Nil ids.
func orNull(id uuid.UUID) uuid.UUID {
	if id == uuid.Nil {
		return NullUUID
	}
	return id
}

// isNull reports whether id means "none" in either spelling.
func isNull(id uuid.UUID) bool { return id == uuid.Nil || id == NullUUID }

// Tenant is a ThingsBoard tenant. Name mirrors Title as ThingsBoard does.
type Tenant struct {
	ID             EntityID        `json:"id"`
	CreatedTime    int64           `json:"createdTime"`
	Title          string          `json:"title"`
	Name           string          `json:"name"`
	Region         string          `json:"region"`
	Country        string          `json:"country"`
	State          string          `json:"state"`
	City           string          `json:"city"`
	Address        string          `json:"address"`
	Address2       string          `json:"address2"`
	Zip            string          `json:"zip"`
	Phone          string          `json:"phone"`
	Email          string          `json:"email"`
	AdditionalInfo json.RawMessage `json:"additionalInfo"`
	// TenantProfileID names the profile holding the tenant's rate limits
	// (tenantprofile.go); a tenant saved without one gets the default.
	TenantProfileID *EntityID `json:"tenantProfileId"`
	Version         int64     `json:"version"`
}

// Customer belongs to one tenant; its title is unique within the tenant.
type Customer struct {
	ID             EntityID        `json:"id"`
	CreatedTime    int64           `json:"createdTime"`
	TenantID       EntityID        `json:"tenantId"`
	Title          string          `json:"title"`
	Name           string          `json:"name"`
	Country        string          `json:"country"`
	State          string          `json:"state"`
	City           string          `json:"city"`
	Address        string          `json:"address"`
	Address2       string          `json:"address2"`
	Zip            string          `json:"zip"`
	Phone          string          `json:"phone"`
	Email          string          `json:"email"`
	AdditionalInfo json.RawMessage `json:"additionalInfo"`
	ExternalID     *EntityID       `json:"externalId"`
	Version        int64           `json:"version"`
}

// User is a platform user (compat §7.4). The password lives in userCredentials and
// is never part of this type, so no encoding of a User can leak it.
type User struct {
	ID             EntityID        `json:"id"`
	CreatedTime    int64           `json:"createdTime"`
	TenantID       EntityID        `json:"tenantId"`
	CustomerID     EntityID        `json:"customerId"`
	Email          string          `json:"email"`
	Authority      string          `json:"authority"`
	FirstName      string          `json:"firstName"`
	LastName       string          `json:"lastName"`
	Phone          string          `json:"phone"`
	Name           string          `json:"name"`
	AdditionalInfo json.RawMessage `json:"additionalInfo"`
	Version        int64           `json:"version"`
}

// userCredentials holds what authenticates a user; stored under the user's id.
// Secrets are stored hashed: the password with bcrypt, a pending activation token
// as its SHA-256 (hex), valid until ActivateExpires (unix ms). JWTs issued (iat,
// unix seconds) before TokensValidFrom are outdated, and so are those of a
// session in RevokedSessions (logged out): session id → unix seconds after which
// no token of it can be valid any more, when the entry may go. The record is
// shared by every node, so a logout holds on all of them.
type userCredentials struct {
	UserID            uuid.UUID        `json:"userId"`
	TenantID          uuid.UUID        `json:"tenantId"`
	Enabled           bool             `json:"enabled"`
	PasswordHash      string           `json:"password"`
	ActivateTokenHash string           `json:"activateTokenHash,omitempty"`
	ActivateExpires   int64            `json:"activateExpires,omitempty"`
	TokensValidFrom   int64            `json:"tokensValidFrom,omitempty"`
	RevokedSessions   map[string]int64 `json:"revokedSessions,omitempty"`
	// Disabled is an administrator's disabling (SetUserCredentialsEnabled). A
	// user not activated yet is not Enabled either; this keeps such a user
	// from activating itself with a link it already has.
	Disabled bool `json:"disabled,omitempty"`
}

// Provision types of a device profile (compat §4).
const (
	ProvisionDisabled    = "DISABLED"
	ProvisionAllowCreate = "ALLOW_CREATE_NEW_DEVICES"
	ProvisionCheckPre    = "CHECK_PRE_PROVISIONED_DEVICES"
	// ProvisionX509Chain is accepted on a profile (ThingsBoard has it) but
	// provisions nothing over HTTP: it is for MQTT devices with X.509 chains.
	ProvisionX509Chain = "X509_CERTIFICATE_CHAIN"
)

// ProvisionConfiguration is the provisioning part of DeviceProfileData. The
// fields Sluice does not read (X509_CERTIFICATE_CHAIN's certificateRegExPattern
// and allowCreateNewDevicesByX509Certificate, any other) are kept verbatim in
// Other, so a profile saved and read back keeps them.
type ProvisionConfiguration struct {
	Type                  string  `json:"type"`
	ProvisionDeviceSecret *string `json:"provisionDeviceSecret"`
	// Other holds the other fields by name, each as its JSON text.
	Other map[string]json.RawMessage `json:"-"`
}

// UnmarshalJSON reads type and provisionDeviceSecret, and keeps every other
// field in Other. null leaves c as it is.
func (c *ProvisionConfiguration) UnmarshalJSON(b []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	if fields == nil { // null
		return nil
	}
	var out ProvisionConfiguration
	if v, ok := fields["type"]; ok {
		if err := json.Unmarshal(v, &out.Type); err != nil {
			return fmt.Errorf("provisionConfiguration.type: %w", err)
		}
		delete(fields, "type")
	}
	if v, ok := fields["provisionDeviceSecret"]; ok {
		if err := json.Unmarshal(v, &out.ProvisionDeviceSecret); err != nil {
			return fmt.Errorf("provisionConfiguration.provisionDeviceSecret: %w", err)
		}
		delete(fields, "provisionDeviceSecret")
	}
	if len(fields) > 0 {
		out.Other = fields
	}
	*c = out
	return nil
}

// MarshalJSON writes type, provisionDeviceSecret, then the other fields in
// the order of their names.
func (c ProvisionConfiguration) MarshalJSON() ([]byte, error) {
	b := []byte(`{"type":`)
	t, err := json.Marshal(c.Type)
	if err != nil {
		return nil, err
	}
	b = append(b, t...)
	s, err := json.Marshal(c.ProvisionDeviceSecret)
	if err != nil {
		return nil, err
	}
	b = append(append(b, `,"provisionDeviceSecret":`...), s...)
	for _, name := range slices.Sorted(maps.Keys(c.Other)) {
		if name == "type" || name == "provisionDeviceSecret" {
			continue
		}
		k, err := json.Marshal(name)
		if err != nil {
			return nil, err
		}
		v := c.Other[name]
		if len(v) == 0 {
			v = json.RawMessage("null")
		}
		b = append(append(append(append(b, ','), k...), ':'), v...)
	}
	return append(b, '}'), nil
}

// DeviceProfileData is the profileData of a device profile. The parts Sluice does
// not interpret are kept verbatim.
type DeviceProfileData struct {
	Configuration          json.RawMessage        `json:"configuration"`
	TransportConfiguration json.RawMessage        `json:"transportConfiguration"`
	ProvisionConfiguration ProvisionConfiguration `json:"provisionConfiguration"`
	Alarms                 json.RawMessage        `json:"alarms"`
}

// DeviceProfile groups devices of one kind within a tenant. Exactly one profile of
// a tenant is the default one.
type DeviceProfile struct {
	ID                 EntityID          `json:"id"`
	CreatedTime        int64             `json:"createdTime"`
	TenantID           EntityID          `json:"tenantId"`
	Name               string            `json:"name"`
	Description        string            `json:"description"`
	Image              *string           `json:"image"`
	Type               string            `json:"type"`
	TransportType      string            `json:"transportType"`
	ProvisionType      string            `json:"provisionType"`
	ProvisionDeviceKey *string           `json:"provisionDeviceKey"`
	DefaultRuleChainID *EntityID         `json:"defaultRuleChainId"`
	DefaultDashboardID *EntityID         `json:"defaultDashboardId"`
	DefaultQueueName   *string           `json:"defaultQueueName"`
	FirmwareID         *EntityID         `json:"firmwareId"`
	SoftwareID         *EntityID         `json:"softwareId"`
	ProfileData        DeviceProfileData `json:"profileData"`
	Default            bool              `json:"default"`
	ExternalID         *EntityID         `json:"externalId"`
	Version            int64             `json:"version"`
}

// DeviceProfileInfo is the short form of a profile (GET /api/deviceProfileInfo/...).
type DeviceProfileInfo struct {
	ID                 EntityID  `json:"id"`
	TenantID           EntityID  `json:"tenantId"`
	Name               string    `json:"name"`
	Image              *string   `json:"image"`
	DefaultDashboardID *EntityID `json:"defaultDashboardId"`
	Type               string    `json:"type"`
	TransportType      string    `json:"transportType"`
}

// Info returns the short form of the profile.
func (p *DeviceProfile) Info() DeviceProfileInfo {
	return DeviceProfileInfo{ID: p.ID, TenantID: p.TenantID, Name: p.Name, Image: p.Image,
		DefaultDashboardID: p.DefaultDashboardID, Type: p.Type, TransportType: p.TransportType}
}

// Device is a ThingsBoard device. Type is the name of its profile. The tenant field
// is Tenant so that TenantID() can serve the device-API hot path.
type Device struct {
	ID              EntityID        `json:"id"`
	CreatedTime     int64           `json:"createdTime"`
	Tenant          EntityID        `json:"tenantId"`
	CustomerID      EntityID        `json:"customerId"`
	Name            string          `json:"name"`
	Type            string          `json:"type"`
	Label           string          `json:"label"`
	DeviceProfileID EntityID        `json:"deviceProfileId"`
	DeviceData      json.RawMessage `json:"deviceData"`
	FirmwareID      *EntityID       `json:"firmwareId"`
	SoftwareID      *EntityID       `json:"softwareId"`
	ExternalID      *EntityID       `json:"externalId"`
	AdditionalInfo  json.RawMessage `json:"additionalInfo"`
	Version         int64           `json:"version"`
}

// UUID returns the id of the device.
func (d *Device) UUID() uuid.UUID { return d.ID.ID }

// TenantID returns the id of the tenant that owns the device.
func (d *Device) TenantID() uuid.UUID { return d.Tenant.ID }

// CredentialsID is the id of device credentials; ThingsBoard writes it without an entity type.
type CredentialsID struct {
	ID uuid.UUID `json:"id"`
}

// DeviceCredentials authenticate a device on the device API. CredentialsID holds the
// access token.
type DeviceCredentials struct {
	ID               CredentialsID `json:"id"`
	CreatedTime      int64         `json:"createdTime"`
	DeviceID         EntityID      `json:"deviceId"`
	CredentialsType  string        `json:"credentialsType"`
	CredentialsID    string        `json:"credentialsId"`
	CredentialsValue *string       `json:"credentialsValue"`
	Version          int64         `json:"version"`
}

// JWTPair is the answer of login and refresh.
type JWTPair struct {
	Token        string `json:"token"`
	RefreshToken string `json:"refreshToken"`
}

var (
	defaultDeviceData = json.RawMessage(`{"configuration":{"type":"DEFAULT"},"transportConfiguration":{"type":"DEFAULT"}}`)
	defaultTypeJSON   = json.RawMessage(`{"type":"DEFAULT"}`)
)
