//! The matrix of cases: calls × B's objects × credentials, each answer compared with the
//! same call on an object that does not exist, and the server and client they go through.

use reqwest::blocking::multipart::{Form, Part};
use reqwest::blocking::{Client, RequestBuilder};
use serde_json::Value;

use crate::common::Server;

/// An object's ids by placeholder name: `{room}` in a template stands for the `room` id.
pub type Ids = Vec<(String, String)>;

pub fn ids(pairs: &[(&str, &str)]) -> Ids {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

pub fn fill(template: &str, ids: &Ids) -> String {
    ids.iter().fold(template.to_owned(), |t, (k, v)| {
        t.replace(&format!("{{{k}}}"), v)
    })
}

pub fn id<'i>(ids: &'i Ids, name: &str) -> &'i str {
    &ids.iter()
        .find(|(k, _)| k == name)
        .expect("an id of the object")
        .1
}

/// What a client acts on in an answer: the status, the headers that tell it what to do,
/// and the body as sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub content_type: Option<String>,
    pub www_authenticate: Option<String>,
    pub body: String,
}

impl Answer {
    pub fn of(req: RequestBuilder) -> Self {
        let res = req.send().unwrap();
        let header = |name: &str| {
            res.headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        Answer {
            status: res.status().as_u16(),
            content_type: header("content-type"),
            www_authenticate: header("www-authenticate"),
            body: res.text().unwrap(),
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// Asserts a 2xx; the body as JSON.
    pub fn ok(&self, what: &str) -> Value {
        assert!((200..300).contains(&self.status), "{what}: {self:?}");
        self.json()
    }

    /// The body with each id of `ids` written as its `{name}`, so that the answers about two
    /// objects compare. Ids shorter than 8 characters (an org id, a stream id) are left as
    /// they are: no answer echoes them, and replacing them would rewrite unrelated digits.
    pub fn naming(mut self, ids: &Ids) -> Self {
        for (name, value) in ids {
            if value.len() >= 8 {
                self.body = self.body.replace(value.as_str(), &format!("{{{name}}}"));
            }
        }
        self
    }

    /// The body with the string at each JSON pointer written as `{its last segment}`: what
    /// is new in every answer (a nonce, a uid).
    pub fn masking(mut self, pointers: &[&str]) -> Self {
        let v = self.json();
        for p in pointers {
            if let Some(s) = v.pointer(p).and_then(Value::as_str) {
                let name = p.rsplit('/').next().unwrap();
                self.body = self.body.replace(s, &format!("{{{name}}}"));
            }
        }
        self
    }
}

/// A credential: its secret (none: the call goes without one), and whether it is a tenant's
/// of this API (its calls reach the object lookup) or one that must not open the API.
pub struct Cred {
    pub name: &'static str,
    pub secret: Option<String>,
    pub tenant: bool,
}

impl Cred {
    pub fn tenant(name: &'static str, secret: &str) -> Self {
        Cred {
            name,
            secret: Some(secret.to_owned()),
            tenant: true,
        }
    }

    pub fn stranger(name: &'static str, secret: Option<&str>) -> Self {
        Cred {
            name,
            secret: secret.map(str::to_owned),
            tenant: false,
        }
    }
}

/// An expected answer: its status and, where it is fixed, its body (ids named, volatile
/// fields masked).
#[derive(Clone)]
pub struct Expect {
    pub status: u16,
    pub body: Option<String>,
}

pub fn expect(status: u16, body: &str) -> Expect {
    Expect {
        status,
        body: Some(body.to_owned()),
    }
}

/// Makes a call with a credential's secret on the object the ids name.
pub type Send<'a> = Box<dyn Fn(Option<&str>, &Ids) -> Answer + 'a>;

/// One of B's objects a call can name, and its twin that does not exist. A listing names
/// no object: it has no twin, only B's data to keep out of its answer.
#[derive(Clone)]
pub struct Object {
    pub name: String,
    pub theirs: Ids,
    pub missing: Option<Ids>,
}

pub fn object(name: &str, theirs: Ids, missing: Ids) -> Object {
    Object {
        name: name.to_owned(),
        theirs,
        missing: Some(missing),
    }
}

pub fn listing() -> Vec<Object> {
    vec![Object {
        name: "the caller's own collection".into(),
        theirs: Vec::new(),
        missing: None,
    }]
}

pub struct Call<'a> {
    pub name: String,
    pub send: Send<'a>,
    pub objects: Vec<Object>,
    /// What a tenant's credential gets.
    pub refused: Expect,
    /// What any other credential gets, where this call answers it unlike the matrix.
    pub unauthorized: Option<Expect>,
    /// Fields that are new in every answer.
    pub masked: &'static [&'static str],
}

pub fn call<'a>(
    name: impl Into<String>,
    send: Send<'a>,
    objects: Vec<Object>,
    refused: Expect,
) -> Call<'a> {
    Call {
        name: name.into(),
        send,
        objects,
        refused,
        unauthorized: None,
        masked: &[],
    }
}

/// Calls × their objects × credentials: every combination is one case.
pub struct Matrix<'a> {
    pub service: &'static str,
    pub creds: Vec<Cred>,
    /// What a credential that is not a tenant's gets.
    pub unauthorized: Expect,
    pub calls: Vec<Call<'a>>,
}

impl Matrix<'_> {
    /// Runs every case; how many there were.
    pub fn run(&self, markers: &[String]) -> usize {
        let mut cases = 0;
        for call in &self.calls {
            for object in &call.objects {
                for cred in &self.creds {
                    let case = format!(
                        "{}: {} on {} with {}",
                        self.service, call.name, object.name, cred.name
                    );
                    let secret = cred.secret.as_deref();
                    let theirs = (call.send)(secret, &object.theirs).naming(&object.theirs);
                    let missing = object
                        .missing
                        .as_ref()
                        .map(|m| (call.send)(secret, m).naming(m));
                    for answer in std::iter::once(&theirs).chain(&missing) {
                        if let Some(m) = markers.iter().find(|m| answer.body.contains(*m)) {
                            panic!("{case}: B's {m:?} in {answer:?}");
                        }
                    }
                    let theirs = theirs.masking(call.masked);
                    if let Some(missing) = missing {
                        assert_eq!(
                            theirs,
                            missing.masking(call.masked),
                            "{case}: answered unlike an object that does not exist"
                        );
                    }
                    let expected = match (cred.tenant, &call.unauthorized) {
                        (true, _) => &call.refused,
                        (false, Some(e)) => e,
                        (false, None) => &self.unauthorized,
                    };
                    assert_eq!(theirs.status, expected.status, "{case}: {theirs:?}");
                    if let Some(body) = &expected.body {
                        assert_eq!(&theirs.body, body, "{case}");
                    }
                    cases += 1;
                }
            }
            let objects: Vec<&str> = call.objects.iter().map(|o| o.name.as_str()).collect();
            eprintln!(
                "isolation: {}: {} on {} x {} credential(s) = {} cases",
                self.service,
                call.name,
                objects.join(", "),
                self.creds.len(),
                call.objects.len() * self.creds.len()
            );
        }
        cases
    }
}

/// How a call carries its body; templates are filled with the object's ids.
pub enum Body {
    Empty,
    Json(String),
    /// A multipart form with one file part.
    File {
        part: &'static str,
        content: String,
    },
}

/// The server, one HTTP client, and the operator token that set everything up.
pub struct Ctx<'s> {
    pub srv: &'s Server,
    pub client: Client,
    pub operator: String,
}

impl Ctx<'_> {
    pub fn url(&self, listener: &str, path: &str) -> String {
        format!("{}{path}", self.srv.url(listener))
    }

    /// An operator call that must succeed; its answer.
    pub fn admin(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let mut req = self
            .client
            .request(method.parse().unwrap(), self.url("admin", path))
            .bearer_auth(&self.operator);
        if let Some(b) = body {
            req = req.json(&b);
        }
        Answer::of(req).ok(&format!("{method} {path}"))
    }

    /// A call as a template: `{name}` in the URL, the headers and the body stands for the
    /// object's id `name`; the secret goes in `Authorization: <scheme> <secret>`.
    pub fn send<'a>(
        &'a self,
        scheme: &'static str,
        method: &str,
        url: String,
        headers: &[(&'static str, &str)],
        body: Body,
    ) -> Send<'a> {
        let method: reqwest::Method = method.parse().unwrap();
        let headers: Vec<(&'static str, String)> =
            headers.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        Box::new(move |secret, ids| {
            let mut req = self.client.request(method.clone(), fill(&url, ids));
            if let Some(s) = secret {
                req = req.header("authorization", format!("{scheme} {s}"));
            }
            for (k, v) in &headers {
                req = req.header(*k, fill(v, ids));
            }
            req = match &body {
                Body::Empty => req,
                Body::Json(t) => req
                    .header("content-type", "application/json")
                    .body(fill(t, ids)),
                Body::File { part, content } => req.multipart(Form::new().part(
                    *part,
                    Part::bytes(fill(content, ids).into_bytes()).file_name("f"),
                )),
            };
            Answer::of(req)
        })
    }
}
