// sluice-swagger.js starts Swagger UI on the Sluice OpenAPI document and adds the
// one thing stock Swagger UI lacks: authorizing with a username and password.
//
// The document declares ThingsBoard's scheme HttpLoginForm as
// {type: http, scheme: loginPassword}, which stock Swagger UI cannot show. So:
//  1. loginFormPlugin presents that scheme to the UI as HTTP basic. The Authorize
//     dialog then asks for username and password, and Swagger UI puts
//     "Authorization: Basic base64(username:password)" on every operation that
//     accepts HttpLoginForm. (Only the page's copy is changed; /v3/api-docs is not.)
//  2. requestInterceptor swaps that header for a real login: it POSTs the
//     credentials to /api/auth/login once, keeps the tokens, renews the access
//     token with the refresh token (/api/auth/token) when it expires, and sends
//     "X-Authorization: Bearer <token>" instead. ApiKeyForm has already
//     written "ApiKey <key>" into that same header, so when both are authorized
//     the JWT overwrites it: the JWT takes precedence, as in ThingsBoard.
//     A login that fails is not tried again until the form is authorized
//     anew: the server locks an account after a few failed logins, and every
//     Execute would be one. The call then goes without the login's credentials
//     and its 401 shows why the login failed.
//  3. A token the main UI left in localStorage.jwt_token is used without asking:
//     while it has not expired, the login form is pre-authorized with the token's
//     user and a placeholder password that is never sent: when the token
//     expires the main UI's refresh token renews it, or the call says to log in
//     again.
//  4. Swagger UI encodes the username and password with window.btoa, which
//     throws on characters past Latin-1: the page's btoa encodes UTF-8 first
//     (and credentials are decoded as UTF-8). Swagger UI takes btoa as it
//     loads, so this script runs before it and starts it at DOMContentLoaded.
(function () {
  "use strict";

  var LOGIN_SCHEME = "loginPassword";
  var LOGIN_URL = "/api/auth/login";
  var REFRESH_URL = "/api/auth/token";

  var loginSchemes = []; // names of the schemes shown as HTTP basic (step 1)
  // base64 "username:password" -> {token, exp (ms), refresh, mainUI} or
  // {failed: message} after a failed login (step 2).
  var logins = new Map();
  var loginFailures = new Map(); // request URL -> why its login failed, until its response

  var latin1btoa = window.btoa.bind(window);
  window.btoa = function (s) {
    return latin1btoa(unescape(encodeURIComponent(String(s))));
  };
  function decode(b64) {
    var raw = atob(b64);
    try {
      return decodeURIComponent(escape(raw));
    } catch (e) {
      return raw; // not UTF-8: encoded by another btoa
    }
  }

  // claims decodes the payload of a JWT; null when it is not one.
  function claims(jwt) {
    try {
      return JSON.parse(atob(jwt.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
    } catch (e) {
      return null;
    }
  }

  function expiry(jwt) {
    var c = claims(jwt);
    return c && c.exp ? c.exp * 1000 : 0;
  }

  function fresh(jwt) {
    return !!jwt && expiry(jwt) > Date.now() + 10000;
  }

  async function postJSON(url, payload) {
    var res = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(payload),
    });
    var body = await res.json().catch(function () { return {}; });
    if (!res.ok || !body.token) {
      throw new Error(url + " answered " + res.status + " " + (body.message || res.statusText));
    }
    return body;
  }

  function keep(cred, body, mainUI) {
    var kept = { token: body.token, exp: expiry(body.token), refresh: body.refreshToken || "", mainUI: mainUI };
    logins.set(cred, kept);
    return kept;
  }

  // tokenFor returns an access token for the credentials of a Basic header:
  // the one kept while it has more than 10 s to live, else one renewed with the
  // refresh token, else one from a login (not for the main UI's token, whose
  // password is a placeholder, nor for credentials whose login failed).
  async function tokenFor(cred) {
    var kept = logins.get(cred);
    if (kept && kept.failed) {
      throw new Error(kept.failed);
    }
    if (kept && kept.exp > Date.now() + 10000) {
      return kept.token;
    }
    if (kept && kept.mainUI) {
      var jwt = window.localStorage.getItem("jwt_token"); // the main UI may have renewed it
      if (fresh(jwt)) {
        return keep(cred, { token: jwt, refreshToken: kept.refresh }, true).token;
      }
    }
    if (kept && kept.refresh) {
      try {
        return keep(cred, await postJSON(REFRESH_URL, { refreshToken: kept.refresh }), kept.mainUI).token;
      } catch (e) {
        // The refresh token expired too: log in again.
      }
    }
    if (kept && kept.mainUI) {
      logins.delete(cred);
      throw new Error("the main UI's session has expired: log in there again, or Logout here and Authorize");
    }
    var raw = decode(cred);
    var colon = raw.indexOf(":");
    try {
      return keep(cred, await postJSON(LOGIN_URL, { username: raw.slice(0, colon), password: raw.slice(colon + 1) }), false).token;
    } catch (e) {
      var why = "login failed, not tried again until you Logout and Authorize: " + e.message;
      logins.set(cred, { failed: why });
      throw new Error(why);
    }
  }

  // requestInterceptor runs on every request the page sends (step 2).
  async function requestInterceptor(req) {
    var h = req.headers || (req.headers = {});
    var key = h["X-Authorization"];
    // ApiKeyForm wants "ApiKey <value>"; a bare value gets the prefix.
    if (typeof key === "string" && key !== "" && !/^(ApiKey|Bearer) /.test(key)) {
      h["X-Authorization"] = "ApiKey " + key.trim();
    }
    var basic = h.Authorization;
    if (typeof basic === "string" && basic.indexOf("Basic ") === 0) {
      delete h.Authorization;
      try {
        h["X-Authorization"] = "Bearer " + (await tokenFor(basic.slice(6)));
      } catch (e) {
        // Thrown from here, Swagger UI shows a broken response panel: the
        // call goes on without the login, and its answer tells why.
        loginFailures.set(req.url, e.message);
      }
    }
    return req;
  }

  // responseInterceptor puts why a login failed into the 401 of its call.
  function responseInterceptor(res) {
    var why = loginFailures.get(res.url);
    loginFailures.delete(res.url);
    if (why && res.status === 401) {
      var obj = { status: 401, message: "Not authorized: " + why, errorCode: 10, timestamp: Date.now() };
      res.obj = res.body = obj;
      res.text = res.data = JSON.stringify(obj);
    }
    return res;
  }

  // forgetLogins drops kept logins and failures when the user authorizes or
  // logs out, so the next call logs in with what was entered.
  function forgetLogins(ori) {
    return function (payload) {
      logins.forEach(function (v, k) {
        if (v.failed || !v.mainUI) {
          logins.delete(k);
        }
      });
      return ori(payload);
    };
  }

  // loginFormPlugin shows loginPassword schemes as HTTP basic (step 1).
  function loginFormPlugin() {
    return {
      statePlugins: {
        spec: {
          wrapActions: {
            updateJsonSpec: function (ori) {
              return function (json) {
                var schemes = (json && json.components && json.components.securitySchemes) || {};
                loginSchemes = [];
                Object.keys(schemes).forEach(function (name) {
                  var s = schemes[name];
                  if (s && s.type === "http" && s.scheme === LOGIN_SCHEME) {
                    schemes[name] = Object.assign({}, s, { scheme: "basic" });
                    loginSchemes.push(name);
                  }
                });
                return ori(json);
              };
            },
          },
        },
        auth: { wrapActions: { authorize: forgetLogins, logout: forgetLogins } },
      },
    };
  }

  // useMainUIToken pre-authorizes the login form with the main UI's token (step 3).
  function useMainUIToken(ui) {
    try {
      var jwt = window.localStorage.getItem("jwt_token");
      var c = jwt && claims(jwt);
      if (!c || c.isPublic || !c.sub || !(c.exp * 1000 > Date.now())) {
        return;
      }
      var password = "main-ui-token-" + Math.random().toString(36).slice(2);
      var refresh = window.localStorage.getItem("refresh_token") || "";
      keep(window.btoa(c.sub + ":" + password), { token: jwt, refreshToken: refresh }, true);
      loginSchemes.forEach(function (name) {
        ui.preauthorizeBasic(name, c.sub, password);
      });
    } catch (e) {
      // No storage access: authorize by hand.
    }
  }

  window.addEventListener("DOMContentLoaded", function () {
    window.ui = SwaggerUIBundle({
      url: "/v3/api-docs",
      dom_id: "#swagger-ui",
      deepLinking: true,
      presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
      plugins: [SwaggerUIBundle.plugins.DownloadUrl, loginFormPlugin],
      layout: "StandaloneLayout",
      validatorUrl: null, // the default badge would call validator.swagger.io
      requestInterceptor: requestInterceptor,
      responseInterceptor: responseInterceptor,
      onComplete: function () {
        useMainUIToken(window.ui);
      },
    });
  });
})();
