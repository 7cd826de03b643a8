//! hc_cql: hotcount's thin C ABI over the `scylla` CQL driver. The contract is the C header,
//! `hc_cql.h` beside this crate; this file only translates. Every entry point catches a panic
//! and reports it as HC_CQL_FATAL, never unwinds into C, and never allocates to report an error
//! (the message goes into the caller's `hc_cql_error_t`).
//!
//! Threading: a session owns a small tokio runtime; each call blocks the calling thread until
//! its requests are done (`block_on`). A session may be used by one thread at a time (the
//! store handle's rule); statements, batches and rows belong to the thread that made them.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::slice;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use openssl::ssl::{SslConnector, SslContext, SslFiletype, SslMethod, SslVerifyMode};
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::client::session::TlsContext;
use scylla::client::session::OpenSsl010Config;
use scylla::errors::{DbError, ExecutionError, NewSessionError, PrepareError, RequestAttemptError, WriteType};
use scylla::policies::load_balancing::DefaultPolicy;
use scylla::policies::retry::FallthroughRetryPolicy;
use scylla::response::{PagingState, PagingStateResponse};
use scylla::response::query_result::QueryResult;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};
use scylla::value::{CqlTimestamp, CqlValue, Row};

// ---- errors ---------------------------------------------------------------------------------

pub const HC_CQL_OK: c_int = 0;
pub const HC_CQL_INVALID: c_int = 1;
pub const HC_CQL_TRANSIENT: c_int = 2;
pub const HC_CQL_UNKNOWN: c_int = 3;
pub const HC_CQL_AUTH: c_int = 4;
pub const HC_CQL_SCHEMA: c_int = 5;
pub const HC_CQL_FATAL: c_int = 6;

pub const HC_CQL_WT_NONE: c_int = 0;
pub const HC_CQL_WT_SIMPLE: c_int = 1;
pub const HC_CQL_WT_BATCH: c_int = 2;
pub const HC_CQL_WT_UNLOGGED_BATCH: c_int = 3;
pub const HC_CQL_WT_COUNTER: c_int = 4;
pub const HC_CQL_WT_BATCH_LOG: c_int = 5;
pub const HC_CQL_WT_CAS: c_int = 6;
pub const HC_CQL_WT_OTHER: c_int = 7;

const MSG_SIZE: usize = 256;

#[repr(C)]
pub struct hc_cql_error_t {
    pub status: c_int,
    pub code: i32,
    pub write_type: c_int,
    pub message: [c_char; MSG_SIZE],
}

fn set_err(err: *mut hc_cql_error_t, status: c_int, code: i32, wt: c_int, msg: &str) -> c_int {
    if !err.is_null() {
        // SAFETY: the caller passes a valid hc_cql_error_t or NULL (header contract).
        let e = unsafe { &mut *err };
        e.status = status;
        e.code = code;
        e.write_type = wt;
        let bytes = msg.as_bytes();
        let mut n = bytes.len().min(MSG_SIZE - 1);
        // Never cut a UTF-8 sequence in half.
        while n > 0 && n < bytes.len() && (bytes[n] & 0xC0) == 0x80 {
            n -= 1;
        }
        for (i, b) in bytes[..n].iter().enumerate() {
            e.message[i] = *b as c_char;
        }
        e.message[n] = 0;
    }
    status
}

fn ok(err: *mut hc_cql_error_t) -> c_int {
    set_err(err, HC_CQL_OK, 0, HC_CQL_WT_NONE, "")
}

fn write_type_of(wt: &WriteType) -> c_int {
    match wt {
        WriteType::Simple => HC_CQL_WT_SIMPLE,
        WriteType::Batch => HC_CQL_WT_BATCH,
        WriteType::UnloggedBatch => HC_CQL_WT_UNLOGGED_BATCH,
        WriteType::Counter => HC_CQL_WT_COUNTER,
        WriteType::BatchLog => HC_CQL_WT_BATCH_LOG,
        WriteType::Cas => HC_CQL_WT_CAS,
        _ => HC_CQL_WT_OTHER,
    }
}

/// (status, CQL error code, write type) of a server error.
fn class_of_db(db: &DbError, msg: &str) -> (c_int, i32, c_int) {
    match db {
        DbError::SyntaxError => (HC_CQL_INVALID, 0x2000, HC_CQL_WT_NONE),
        DbError::Invalid => {
            // Cassandra answers a missing keyspace, table or column with Invalid; for hotcount
            // that is a schema to create (`hotcount init`), not a bad statement.
            let schema = msg.contains("unconfigured table")
                || msg.contains("does not exist")
                || msg.contains("Undefined column")
                || msg.contains("Undefined name");
            (if schema { HC_CQL_SCHEMA } else { HC_CQL_INVALID }, 0x2200, HC_CQL_WT_NONE)
        }
        DbError::AlreadyExists { .. } => (HC_CQL_INVALID, 0x2400, HC_CQL_WT_NONE),
        DbError::AuthenticationError => (HC_CQL_AUTH, 0x0100, HC_CQL_WT_NONE),
        DbError::Unauthorized => (HC_CQL_AUTH, 0x2100, HC_CQL_WT_NONE),
        DbError::ConfigError => (HC_CQL_FATAL, 0x2300, HC_CQL_WT_NONE),
        // Refused before anything was written: safe to retry.
        DbError::Unavailable { .. } => (HC_CQL_TRANSIENT, 0x1000, HC_CQL_WT_NONE),
        DbError::Overloaded => (HC_CQL_TRANSIENT, 0x1001, HC_CQL_WT_NONE),
        DbError::IsBootstrapping => (HC_CQL_TRANSIENT, 0x1002, HC_CQL_WT_NONE),
        DbError::TruncateError => (HC_CQL_TRANSIENT, 0x1003, HC_CQL_WT_NONE),
        DbError::ReadTimeout { .. } => (HC_CQL_TRANSIENT, 0x1200, HC_CQL_WT_NONE),
        DbError::ReadFailure { .. } => (HC_CQL_TRANSIENT, 0x1300, HC_CQL_WT_NONE),
        DbError::Unprepared { .. } => (HC_CQL_TRANSIENT, 0x2500, HC_CQL_WT_NONE),
        DbError::RateLimitReached { .. } => (HC_CQL_TRANSIENT, 0x4321, HC_CQL_WT_NONE),
        // A write that the coordinator gave up on: it may be applied on some replicas, or
        // later (hints). The caller must treat it as maybe applied.
        DbError::WriteTimeout { write_type, .. } => {
            (HC_CQL_UNKNOWN, 0x1100, write_type_of(write_type))
        }
        DbError::WriteFailure { write_type, .. } => {
            (HC_CQL_UNKNOWN, 0x1500, write_type_of(write_type))
        }
        DbError::ServerError => (HC_CQL_FATAL, 0x0000, HC_CQL_WT_NONE),
        DbError::ProtocolError => (HC_CQL_FATAL, 0x000A, HC_CQL_WT_NONE),
        _ => (HC_CQL_FATAL, -1, HC_CQL_WT_NONE),
    }
}

fn class_of_attempt(e: &RequestAttemptError) -> (c_int, i32, c_int) {
    match e {
        RequestAttemptError::DbError(db, msg) => class_of_db(db, msg),
        RequestAttemptError::SerializationError(_)
        | RequestAttemptError::CqlRequestSerialization(_) => (HC_CQL_INVALID, 0, HC_CQL_WT_NONE),
        // Never sent.
        RequestAttemptError::UnableToAllocStreamId => (HC_CQL_TRANSIENT, 0, HC_CQL_WT_NONE),
        // Sent, then the connection broke: the request may have been executed.
        RequestAttemptError::BrokenConnectionError(_) => (HC_CQL_UNKNOWN, 0, HC_CQL_WT_NONE),
        _ => (HC_CQL_FATAL, 0, HC_CQL_WT_NONE),
    }
}

fn class_of_prepare(e: &PrepareError) -> (c_int, i32, c_int) {
    match e {
        PrepareError::ConnectionPoolError(_) => (HC_CQL_TRANSIENT, 0, HC_CQL_WT_NONE),
        PrepareError::AllAttemptsFailed { first_attempt } => {
            let (s, c, w) = class_of_attempt(first_attempt);
            // Preparing writes nothing: "maybe applied" means nothing here.
            (if s == HC_CQL_UNKNOWN { HC_CQL_TRANSIENT } else { s }, c, w)
        }
        _ => (HC_CQL_FATAL, 0, HC_CQL_WT_NONE),
    }
}

fn class_of_exec(e: &ExecutionError) -> (c_int, i32, c_int) {
    match e {
        ExecutionError::BadQuery(_) => (HC_CQL_INVALID, 0, HC_CQL_WT_NONE),
        ExecutionError::EmptyPlan => (HC_CQL_TRANSIENT, 0, HC_CQL_WT_NONE),
        ExecutionError::PrepareError(p) => class_of_prepare(p),
        ExecutionError::ConnectionPoolError(_) => (HC_CQL_TRANSIENT, 0, HC_CQL_WT_NONE),
        ExecutionError::LastAttemptError(a) => class_of_attempt(a),
        // The client's own timeout: the request may still run on the server.
        ExecutionError::RequestTimeout(_) => (HC_CQL_UNKNOWN, 0, HC_CQL_WT_NONE),
        ExecutionError::SchemaAgreementError(_) | ExecutionError::MetadataError(_) => {
            (HC_CQL_TRANSIENT, 0, HC_CQL_WT_NONE)
        }
        ExecutionError::UseKeyspaceError(_) => (HC_CQL_SCHEMA, 0, HC_CQL_WT_NONE),
        _ => (HC_CQL_FATAL, 0, HC_CQL_WT_NONE),
    }
}

fn report_exec(err: *mut hc_cql_error_t, e: &ExecutionError) -> c_int {
    let (s, c, w) = class_of_exec(e);
    set_err(err, s, c, w, &e.to_string())
}

fn report_new_session(err: *mut hc_cql_error_t, e: &NewSessionError) -> c_int {
    let text = e.to_string();
    let status = match e {
        NewSessionError::EmptyKnownNodesList | NewSessionError::IllegalConfig(_) => HC_CQL_INVALID,
        NewSessionError::UseKeyspaceError(_) => HC_CQL_SCHEMA,
        _ => {
            // A refused login shows as a metadata fetch whose connections all failed to set
            // up; the driver keeps the server's answer only in the text.
            if text.contains("Authentication") || text.contains("authentication") {
                HC_CQL_AUTH
            } else {
                HC_CQL_TRANSIENT
            }
        }
    };
    set_err(err, status, 0, HC_CQL_WT_NONE, &text)
}

/// Runs f, turning a panic into HC_CQL_FATAL.
fn guard(err: *mut hc_cql_error_t, f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(s) => s,
        Err(_) => set_err(err, HC_CQL_FATAL, 0, HC_CQL_WT_NONE, "hc_cql: internal panic"),
    }
}

/// A C string argument: None for NULL or "", Err for invalid UTF-8.
fn opt_str<'a>(p: *const c_char) -> Result<Option<&'a str>, ()> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the header requires NUL-terminated strings that outlive the call.
    let s = unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| ())?;
    Ok(if s.is_empty() { None } else { Some(s) })
}

// ---- session --------------------------------------------------------------------------------

#[repr(C)]
pub struct hc_cql_config_t {
    pub contact_points: *const c_char,
    pub user: *const c_char,
    pub password: *const c_char,
    pub local_dc: *const c_char,
    pub keyspace: *const c_char,
    pub tls: c_int,
    pub tls_verify: c_int,
    pub tls_ca_file: *const c_char,
    pub tls_cert_file: *const c_char,
    pub tls_key_file: *const c_char,
    pub connect_timeout_ms: u32,
    pub request_timeout_ms: u32,
}

pub struct hc_cql_session_t {
    session: Option<Session>,
    rt: Option<tokio::runtime::Runtime>,
}

impl Drop for hc_cql_session_t {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            {
                // The driver's connection tasks live on this runtime: drop the session inside
                // it, then give the runtime a bounded time to wind down.
                let _g = rt.enter();
                self.session.take();
            }
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

fn tls_context(cfg: &hc_cql_config_t) -> Result<TlsContext, String> {
    let ca = opt_str(cfg.tls_ca_file).map_err(|_| "tls_ca_file is not UTF-8".to_string())?;
    let cert = opt_str(cfg.tls_cert_file).map_err(|_| "tls_cert_file is not UTF-8".to_string())?;
    let key = opt_str(cfg.tls_key_file).map_err(|_| "tls_key_file is not UTF-8".to_string())?;
    let e = |what: &str, err: openssl::error::ErrorStack| format!("TLS: {what}: {err}");
    if cfg.tls_verify != 0 {
        // Verifies the node's certificate chain against the CA (the system's without one) and
        // its IP address (the driver connects by address, including to discovered peers).
        let mut b = SslConnector::builder(SslMethod::tls()).map_err(|x| e("context", x))?;
        if let Some(ca) = ca {
            b.set_ca_file(ca).map_err(|x| e("CA file", x))?;
        }
        if let Some(cert) = cert {
            b.set_certificate_chain_file(cert).map_err(|x| e("certificate file", x))?;
        }
        if let Some(key) = key {
            b.set_private_key_file(key, SslFiletype::PEM).map_err(|x| e("key file", x))?;
        }
        Ok(OpenSsl010Config::new(b).into())
    } else {
        let mut b = SslContext::builder(SslMethod::tls()).map_err(|x| e("context", x))?;
        b.set_verify(SslVerifyMode::NONE);
        if let Some(cert) = cert {
            b.set_certificate_chain_file(cert).map_err(|x| e("certificate file", x))?;
        }
        if let Some(key) = key {
            b.set_private_key_file(key, SslFiletype::PEM).map_err(|x| e("key file", x))?;
        }
        Ok(OpenSsl010Config::from_dangerous_builder(b).into())
    }
}

#[no_mangle]
pub extern "C" fn hc_cql_session_open(
    cfg: *const hc_cql_config_t,
    out: *mut *mut hc_cql_session_t,
    err: *mut hc_cql_error_t,
) -> c_int {
    guard(err, || {
        if out.is_null() || cfg.is_null() {
            return set_err(err, HC_CQL_INVALID, 0, 0, "hc_cql_session_open: NULL argument");
        }
        // SAFETY: checked non-NULL; the header says both are valid.
        unsafe { *out = ptr::null_mut() };
        let cfg = unsafe { &*cfg };
        let bad = |what: &str| set_err(err, HC_CQL_INVALID, 0, 0, &format!("{what} is not UTF-8"));
        let Ok(contacts) = opt_str(cfg.contact_points) else { return bad("contact_points") };
        let Ok(user) = opt_str(cfg.user) else { return bad("user") };
        let Ok(password) = opt_str(cfg.password) else { return bad("password") };
        let Ok(dc) = opt_str(cfg.local_dc) else { return bad("local_dc") };
        let Ok(keyspace) = opt_str(cfg.keyspace) else { return bad("keyspace") };
        let Some(contacts) = contacts else {
            return set_err(err, HC_CQL_INVALID, 0, 0, "no contact point");
        };
        let mut lb = DefaultPolicy::builder().token_aware(true);
        if let Some(dc) = dc {
            lb = lb.prefer_datacenter(dc.to_string()).permit_dc_failover(false);
        }
        let request_timeout = match cfg.request_timeout_ms {
            0 => Duration::from_secs(12),
            ms => Duration::from_millis(u64::from(ms)),
        };
        // No driver retries: the caller decides what is safe to repeat (docs/CASSANDRA.md).
        let profile = ExecutionProfile::builder()
            .consistency(Consistency::LocalQuorum)
            .serial_consistency(Some(SerialConsistency::LocalSerial))
            .request_timeout(Some(request_timeout))
            .retry_policy(Arc::new(FallthroughRetryPolicy))
            .load_balancing_policy(lb.build())
            .build();
        let connect_timeout = match cfg.connect_timeout_ms {
            0 => Duration::from_secs(10),
            ms => Duration::from_millis(u64::from(ms)),
        };
        let mut b = SessionBuilder::new()
            .connection_timeout(connect_timeout)
            .default_execution_profile_handle(profile.into_handle())
            .metadata_request_serverside_timeout(request_timeout)
            .metadata_request_clientside_timeout(request_timeout)
            .hostname_resolution_timeout(Some(connect_timeout));
        for c in contacts.split(',') {
            let c = c.trim();
            if c.is_empty() {
                continue;
            }
            // A bare host gets the CQL port 9042; "[v6]" and "[v6]:port" pass as they are.
            let has_port = if c.starts_with('[') { c.contains("]:") } else { c.contains(':') };
            if has_port {
                b = b.known_node(c);
            } else {
                b = b.known_node(format!("{c}:9042"));
            }
        }
        if let (Some(u), p) = (user, password) {
            b = b.user(u, p.unwrap_or(""));
        }
        if let Some(ks) = keyspace {
            b = b.use_keyspace(ks, true);
        }
        if cfg.tls != 0 {
            match tls_context(cfg) {
                Ok(t) => b = b.tls_context(Some(t)),
                Err(m) => return set_err(err, HC_CQL_INVALID, 0, 0, &m),
            }
        }
        let rt = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("hc-cql")
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => return set_err(err, HC_CQL_FATAL, 0, 0, &format!("runtime: {e}")),
        };
        let res = rt.block_on(async { tokio::time::timeout(connect_timeout * 3, b.build()).await });
        let session = match res {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                let s = report_new_session(err, &e);
                let _g = rt.enter();
                drop(e);
                return s;
            }
            Err(_) => {
                return set_err(err, HC_CQL_TRANSIENT, 0, 0, "connect: timed out");
            }
        };
        let h = Box::new(hc_cql_session_t { session: Some(session), rt: Some(rt) });
        unsafe { *out = Box::into_raw(h) };
        ok(err)
    })
}

#[no_mangle]
pub extern "C" fn hc_cql_session_close(s: *mut hc_cql_session_t) {
    if s.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: made by Box::into_raw in hc_cql_session_open, closed once (header).
        drop(unsafe { Box::from_raw(s) });
    }));
}

fn parts(s: *mut hc_cql_session_t) -> Option<(&'static Session, &'static tokio::runtime::Runtime)> {
    if s.is_null() {
        return None;
    }
    // SAFETY: a live session from hc_cql_session_open; used by one thread at a time. The
    // references do not outlive the call that takes them.
    let h = unsafe { &*s };
    match (&h.session, &h.rt) {
        (Some(se), Some(rt)) => {
            let se: &'static Session = unsafe { &*(se as *const Session) };
            let rt: &'static tokio::runtime::Runtime =
                unsafe { &*(rt as *const tokio::runtime::Runtime) };
            Some((se, rt))
        }
        _ => None,
    }
}

/// Runs a statement without values, unprepared (schema statements). Waits for schema agreement
/// after a schema change (the driver's default).
#[no_mangle]
pub extern "C" fn hc_cql_query(
    s: *mut hc_cql_session_t,
    cql: *const c_char,
    err: *mut hc_cql_error_t,
) -> c_int {
    guard(err, || {
        let Some((se, rt)) = parts(s) else {
            return set_err(err, HC_CQL_INVALID, 0, 0, "hc_cql_query: NULL session");
        };
        let Ok(Some(q)) = opt_str(cql) else {
            return set_err(err, HC_CQL_INVALID, 0, 0, "hc_cql_query: empty or non-UTF-8 CQL");
        };
        match rt.block_on(se.query_unpaged(q, &[] as &[CqlValue])) {
            Ok(_) => ok(err),
            Err(e) => report_exec(err, &e),
        }
    })
}

// ---- prepared statements --------------------------------------------------------------------

pub struct hc_cql_prepared_t {
    p: PreparedStatement,
}

#[no_mangle]
pub extern "C" fn hc_cql_prepare(
    s: *mut hc_cql_session_t,
    cql: *const c_char,
    out: *mut *mut hc_cql_prepared_t,
    err: *mut hc_cql_error_t,
) -> c_int {
    guard(err, || {
        if out.is_null() {
            return set_err(err, HC_CQL_INVALID, 0, 0, "hc_cql_prepare: NULL out");
        }
        unsafe { *out = ptr::null_mut() };
        let Some((se, rt)) = parts(s) else {
            return set_err(err, HC_CQL_INVALID, 0, 0, "hc_cql_prepare: NULL session");
        };
        let Ok(Some(q)) = opt_str(cql) else {
            return set_err(err, HC_CQL_INVALID, 0, 0, "hc_cql_prepare: empty or non-UTF-8 CQL");
        };
        match rt.block_on(se.prepare(q)) {
            Ok(p) => {
                unsafe { *out = Box::into_raw(Box::new(hc_cql_prepared_t { p })) };
                ok(err)
            }
            Err(e) => {
                let (st, c, w) = class_of_prepare(&e);
                set_err(err, st, c, w, &e.to_string())
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn hc_cql_prepared_free(p: *mut hc_cql_prepared_t) {
    if !p.is_null() {
        drop(unsafe { Box::from_raw(p) });
    }
}

// ---- bound statements -----------------------------------------------------------------------

pub struct hc_cql_stmt_t {
    p: PreparedStatement,
    values: Vec<Option<CqlValue>>,
    paging: PagingState,
    has_more: bool,
}

#[no_mangle]
pub extern "C" fn hc_cql_stmt_new(p: *const hc_cql_prepared_t) -> *mut hc_cql_stmt_t {
    if p.is_null() {
        return ptr::null_mut();
    }
    catch_unwind(AssertUnwindSafe(|| {
        let p = unsafe { &*p };
        let n = p.p.get_variable_col_specs().len();
        Box::into_raw(Box::new(hc_cql_stmt_t {
            p: p.p.clone(),
            values: vec![None; n],
            paging: PagingState::start(),
            has_more: false,
        }))
    }))
    .unwrap_or(ptr::null_mut())
}

#[no_mangle]
pub extern "C" fn hc_cql_stmt_free(st: *mut hc_cql_stmt_t) {
    if !st.is_null() {
        drop(unsafe { Box::from_raw(st) });
    }
}

fn bind(st: *mut hc_cql_stmt_t, i: usize, v: Option<CqlValue>) -> c_int {
    if st.is_null() {
        return HC_CQL_INVALID;
    }
    let st = unsafe { &mut *st };
    match st.values.get_mut(i) {
        Some(slot) => {
            *slot = v;
            HC_CQL_OK
        }
        None => HC_CQL_INVALID,
    }
}

fn bytes<'a>(p: *const u8, len: usize) -> &'a [u8] {
    if len == 0 || p.is_null() {
        &[]
    } else {
        unsafe { slice::from_raw_parts(p, len) }
    }
}

#[no_mangle]
pub extern "C" fn hc_cql_bind_null(st: *mut hc_cql_stmt_t, i: usize) -> c_int {
    bind(st, i, None)
}

#[no_mangle]
pub extern "C" fn hc_cql_bind_text(st: *mut hc_cql_stmt_t, i: usize, p: *const u8, len: usize) -> c_int {
    match std::str::from_utf8(bytes(p, len)) {
        Ok(s) => bind(st, i, Some(CqlValue::Text(s.to_owned()))),
        Err(_) => HC_CQL_INVALID, // a CQL text holds UTF-8 only
    }
}

#[no_mangle]
pub extern "C" fn hc_cql_bind_blob(st: *mut hc_cql_stmt_t, i: usize, p: *const u8, len: usize) -> c_int {
    bind(st, i, Some(CqlValue::Blob(bytes(p, len).to_vec())))
}

#[no_mangle]
pub extern "C" fn hc_cql_bind_int64(st: *mut hc_cql_stmt_t, i: usize, v: i64) -> c_int {
    bind(st, i, Some(CqlValue::BigInt(v)))
}

#[no_mangle]
pub extern "C" fn hc_cql_bind_int32(st: *mut hc_cql_stmt_t, i: usize, v: i32) -> c_int {
    bind(st, i, Some(CqlValue::Int(v)))
}

#[no_mangle]
pub extern "C" fn hc_cql_bind_bool(st: *mut hc_cql_stmt_t, i: usize, v: c_int) -> c_int {
    bind(st, i, Some(CqlValue::Boolean(v != 0)))
}

#[no_mangle]
pub extern "C" fn hc_cql_bind_timestamp_ms(st: *mut hc_cql_stmt_t, i: usize, ms: i64) -> c_int {
    bind(st, i, Some(CqlValue::Timestamp(CqlTimestamp(ms))))
}

#[no_mangle]
pub extern "C" fn hc_cql_bind_uuid(st: *mut hc_cql_stmt_t, i: usize, b: *const u8) -> c_int {
    if b.is_null() {
        return HC_CQL_INVALID;
    }
    let mut a = [0u8; 16];
    a.copy_from_slice(bytes(b, 16));
    bind(st, i, Some(CqlValue::Uuid(uuid::Uuid::from_bytes(a))))
}

fn consistency_of(c: c_int) -> Option<Consistency> {
    Some(match c {
        0x0000 => Consistency::Any,
        0x0001 => Consistency::One,
        0x0002 => Consistency::Two,
        0x0003 => Consistency::Three,
        0x0004 => Consistency::Quorum,
        0x0005 => Consistency::All,
        0x0006 => Consistency::LocalQuorum,
        0x0007 => Consistency::EachQuorum,
        // SERIAL and LOCAL_SERIAL as a read's consistency: a Paxos read that completes any round
        // left in flight (the backend's claims read, docs/CASSANDRA.md R0).
        0x0008 => Consistency::Serial,
        0x0009 => Consistency::LocalSerial,
        0x000A => Consistency::LocalOne,
        _ => return None,
    })
}

fn serial_of(c: c_int) -> Option<SerialConsistency> {
    match c {
        0x0008 => Some(SerialConsistency::Serial),
        0x0009 => Some(SerialConsistency::LocalSerial),
        _ => None,
    }
}

#[no_mangle]
pub extern "C" fn hc_cql_stmt_set_consistency(st: *mut hc_cql_stmt_t, c: c_int) -> c_int {
    let Some(c) = consistency_of(c) else { return HC_CQL_INVALID };
    if st.is_null() {
        return HC_CQL_INVALID;
    }
    unsafe { &mut *st }.p.set_consistency(c);
    HC_CQL_OK
}

#[no_mangle]
pub extern "C" fn hc_cql_stmt_set_serial_consistency(st: *mut hc_cql_stmt_t, c: c_int) -> c_int {
    let Some(c) = serial_of(c) else { return HC_CQL_INVALID };
    if st.is_null() {
        return HC_CQL_INVALID;
    }
    unsafe { &mut *st }.p.set_serial_consistency(Some(c));
    HC_CQL_OK
}

/// The write timestamp in microseconds (CQL's USING TIMESTAMP, sent as the request's default
/// timestamp); HC_CQL_NO_TIMESTAMP (INT64_MIN): the server's clock.
#[no_mangle]
pub extern "C" fn hc_cql_stmt_set_timestamp(st: *mut hc_cql_stmt_t, us: i64) {
    if !st.is_null() {
        unsafe { &mut *st }.p.set_timestamp(if us == i64::MIN { None } else { Some(us) });
    }
}

#[no_mangle]
pub extern "C" fn hc_cql_stmt_set_timeout_ms(st: *mut hc_cql_stmt_t, ms: u32) {
    if !st.is_null() {
        let t = if ms == 0 { None } else { Some(Duration::from_millis(u64::from(ms))) };
        unsafe { &mut *st }.p.set_request_timeout(t);
    }
}

#[no_mangle]
pub extern "C" fn hc_cql_stmt_set_page_size(st: *mut hc_cql_stmt_t, rows: i32) -> c_int {
    if st.is_null() || rows <= 0 {
        return HC_CQL_INVALID;
    }
    unsafe { &mut *st }.p.set_page_size(rows);
    HC_CQL_OK
}

#[no_mangle]
pub extern "C" fn hc_cql_stmt_set_idempotent(st: *mut hc_cql_stmt_t, idempotent: c_int) {
    if !st.is_null() {
        unsafe { &mut *st }.p.set_is_idempotent(idempotent != 0);
    }
}

#[no_mangle]
pub extern "C" fn hc_cql_stmt_has_more_pages(st: *const hc_cql_stmt_t) -> c_int {
    if st.is_null() {
        return 0;
    }
    c_int::from(unsafe { &*st }.has_more)
}

/// Starts the statement's paging again from the first page.
#[no_mangle]
pub extern "C" fn hc_cql_stmt_reset_paging(st: *mut hc_cql_stmt_t) {
    if !st.is_null() {
        let st = unsafe { &mut *st };
        st.paging = PagingState::start();
        st.has_more = false;
    }
}

// ---- results --------------------------------------------------------------------------------

pub struct hc_cql_rows_t {
    rows: Vec<Row>,
}

fn rows_of(r: QueryResult) -> Result<hc_cql_rows_t, String> {
    if !r.is_rows() {
        return Ok(hc_cql_rows_t { rows: Vec::new() });
    }
    let rr = r.into_rows_result().map_err(|e| e.to_string())?;
    let it = rr.rows::<Row>().map_err(|e| e.to_string())?;
    let mut rows = Vec::with_capacity(rr.rows_num());
    for row in it {
        rows.push(row.map_err(|e| e.to_string())?);
    }
    Ok(hc_cql_rows_t { rows })
}

fn give_rows(out: *mut *mut hc_cql_rows_t, r: QueryResult, err: *mut hc_cql_error_t) -> c_int {
    if out.is_null() {
        return ok(err);
    }
    match rows_of(r) {
        Ok(rows) => {
            unsafe { *out = Box::into_raw(Box::new(rows)) };
            ok(err)
        }
        Err(m) => set_err(err, HC_CQL_FATAL, 0, 0, &format!("result: {m}")),
    }
}

#[no_mangle]
pub extern "C" fn hc_cql_rows_free(r: *mut hc_cql_rows_t) {
    if !r.is_null() {
        drop(unsafe { Box::from_raw(r) });
    }
}

#[no_mangle]
pub extern "C" fn hc_cql_rows_count(r: *const hc_cql_rows_t) -> usize {
    if r.is_null() {
        0
    } else {
        unsafe { &*r }.rows.len()
    }
}

fn cell<'a>(r: *const hc_cql_rows_t, row: usize, col: usize) -> Result<Option<&'a CqlValue>, ()> {
    if r.is_null() {
        return Err(());
    }
    let r = unsafe { &*r };
    let row = r.rows.get(row).ok_or(())?;
    let c = row.columns.get(col).ok_or(())?;
    Ok(c.as_ref())
}

#[no_mangle]
pub extern "C" fn hc_cql_rows_is_null(r: *const hc_cql_rows_t, row: usize, col: usize) -> c_int {
    match cell(r, row, col) {
        Ok(None) => 1,
        Ok(Some(_)) => 0,
        Err(()) => 1,
    }
}

#[no_mangle]
pub extern "C" fn hc_cql_rows_int64(r: *const hc_cql_rows_t, row: usize, col: usize, out: *mut i64) -> c_int {
    let v = match cell(r, row, col) {
        Ok(Some(CqlValue::BigInt(v))) => *v,
        Ok(Some(CqlValue::Int(v))) => i64::from(*v),
        Ok(Some(CqlValue::SmallInt(v))) => i64::from(*v),
        Ok(Some(CqlValue::TinyInt(v))) => i64::from(*v),
        Ok(Some(CqlValue::Counter(c))) => c.0,
        Ok(Some(CqlValue::Timestamp(t))) => t.0,
        _ => return HC_CQL_INVALID,
    };
    if !out.is_null() {
        unsafe { *out = v };
    }
    HC_CQL_OK
}

#[no_mangle]
pub extern "C" fn hc_cql_rows_bool(r: *const hc_cql_rows_t, row: usize, col: usize, out: *mut c_int) -> c_int {
    match cell(r, row, col) {
        Ok(Some(CqlValue::Boolean(b))) => {
            if !out.is_null() {
                unsafe { *out = c_int::from(*b) };
            }
            HC_CQL_OK
        }
        _ => HC_CQL_INVALID,
    }
}

/// text, ascii or blob: *p points into the rows (valid until hc_cql_rows_free), not NUL-ended.
#[no_mangle]
pub extern "C" fn hc_cql_rows_bytes(
    r: *const hc_cql_rows_t,
    row: usize,
    col: usize,
    p: *mut *const u8,
    len: *mut usize,
) -> c_int {
    let b: &[u8] = match cell(r, row, col) {
        Ok(Some(CqlValue::Text(s))) | Ok(Some(CqlValue::Ascii(s))) => s.as_bytes(),
        Ok(Some(CqlValue::Blob(v))) => v.as_slice(),
        _ => return HC_CQL_INVALID,
    };
    if !p.is_null() {
        unsafe { *p = b.as_ptr() };
    }
    if !len.is_null() {
        unsafe { *len = b.len() };
    }
    HC_CQL_OK
}

#[no_mangle]
pub extern "C" fn hc_cql_rows_uuid(r: *const hc_cql_rows_t, row: usize, col: usize, out: *mut u8) -> c_int {
    let u = match cell(r, row, col) {
        Ok(Some(CqlValue::Uuid(u))) => *u,
        Ok(Some(CqlValue::Timeuuid(t))) => uuid::Uuid::from(*t),
        _ => return HC_CQL_INVALID,
    };
    if !out.is_null() {
        unsafe { ptr::copy_nonoverlapping(u.as_bytes().as_ptr(), out, 16) };
    }
    HC_CQL_OK
}

// ---- execution ------------------------------------------------------------------------------

/// Executes one page of the statement (its page size; the whole result for a statement that
/// returns no rows) from where its paging state stands, and moves that state on.
#[no_mangle]
pub extern "C" fn hc_cql_execute(
    s: *mut hc_cql_session_t,
    st: *mut hc_cql_stmt_t,
    rows_out: *mut *mut hc_cql_rows_t,
    err: *mut hc_cql_error_t,
) -> c_int {
    guard(err, || {
        if !rows_out.is_null() {
            unsafe { *rows_out = ptr::null_mut() };
        }
        let Some((se, rt)) = parts(s) else {
            return set_err(err, HC_CQL_INVALID, 0, 0, "hc_cql_execute: NULL session");
        };
        if st.is_null() {
            return set_err(err, HC_CQL_INVALID, 0, 0, "hc_cql_execute: NULL statement");
        }
        let st = unsafe { &mut *st };
        let res = rt.block_on(se.execute_single_page(&st.p, &st.values, st.paging.clone()));
        match res {
            Ok((r, next)) => {
                match next {
                    PagingStateResponse::HasMorePages { state } => {
                        st.paging = state;
                        st.has_more = true;
                    }
                    _ => {
                        st.paging = PagingState::start();
                        st.has_more = false;
                    }
                }
                give_rows(rows_out, r, err)
            }
            Err(e) => report_exec(err, &e),
        }
    })
}

/// Executes n statements concurrently, at most `concurrency` in flight, each unpaged (the
/// whole result in one response). statuses_out[i] (optional) gets each one's class, rows_out[i]
/// (optional) its rows or NULL; err gets the first failure in index order. Returns HC_CQL_OK
/// when all succeeded, else the status of that first failure.
#[no_mangle]
pub extern "C" fn hc_cql_execute_many(
    s: *mut hc_cql_session_t,
    stmts: *const *mut hc_cql_stmt_t,
    n: usize,
    concurrency: usize,
    statuses_out: *mut c_int,
    rows_out: *mut *mut hc_cql_rows_t,
    err: *mut hc_cql_error_t,
) -> c_int {
    guard(err, || {
        let Some((se, rt)) = parts(s) else {
            return set_err(err, HC_CQL_INVALID, 0, 0, "hc_cql_execute_many: NULL session");
        };
        if n == 0 {
            return ok(err);
        }
        if stmts.is_null() {
            return set_err(err, HC_CQL_INVALID, 0, 0, "hc_cql_execute_many: NULL statements");
        }
        let list: &[*mut hc_cql_stmt_t] = unsafe { slice::from_raw_parts(stmts, n) };
        if list.iter().any(|p| p.is_null()) {
            return set_err(err, HC_CQL_INVALID, 0, 0, "hc_cql_execute_many: NULL statement");
        }
        let refs: Vec<&hc_cql_stmt_t> = list.iter().map(|p| unsafe { &**p }).collect();
        let results: Vec<(usize, Result<QueryResult, ExecutionError>)> = rt.block_on(async {
            stream::iter(refs.iter().enumerate())
                .map(|(i, st)| async move { (i, se.execute_unpaged(&st.p, &st.values).await) })
                .buffer_unordered(concurrency.max(1))
                .collect()
                .await
        });
        let mut first: Option<(usize, c_int, i32, c_int, String)> = None;
        for (i, r) in results {
            let status = match r {
                Ok(q) => {
                    if !rows_out.is_null() {
                        match rows_of(q) {
                            Ok(rows) => unsafe { *rows_out.add(i) = Box::into_raw(Box::new(rows)) },
                            Err(m) => {
                                unsafe { *rows_out.add(i) = ptr::null_mut() };
                                if first.as_ref().is_none_or(|f| i < f.0) {
                                    first = Some((i, HC_CQL_FATAL, 0, 0, format!("result: {m}")));
                                }
                                if !statuses_out.is_null() {
                                    unsafe { *statuses_out.add(i) = HC_CQL_FATAL };
                                }
                                continue;
                            }
                        }
                    }
                    HC_CQL_OK
                }
                Err(e) => {
                    let (st, c, w) = class_of_exec(&e);
                    if !rows_out.is_null() {
                        unsafe { *rows_out.add(i) = ptr::null_mut() };
                    }
                    if first.as_ref().is_none_or(|f| i < f.0) {
                        first = Some((i, st, c, w, format!("statement {i}: {e}")));
                    }
                    st
                }
            };
            if !statuses_out.is_null() {
                unsafe { *statuses_out.add(i) = status };
            }
        }
        match first {
            None => ok(err),
            Some((_, st, c, w, m)) => set_err(err, st, c, w, &m),
        }
    })
}

// ---- batches --------------------------------------------------------------------------------

pub const HC_CQL_BATCH_LOGGED: c_int = 0;
pub const HC_CQL_BATCH_UNLOGGED: c_int = 1;

pub struct hc_cql_batch_t {
    b: Batch,
    values: Vec<Vec<Option<CqlValue>>>,
}

#[no_mangle]
pub extern "C" fn hc_cql_batch_new(kind: c_int) -> *mut hc_cql_batch_t {
    let t = match kind {
        HC_CQL_BATCH_LOGGED => BatchType::Logged,
        HC_CQL_BATCH_UNLOGGED => BatchType::Unlogged,
        _ => return ptr::null_mut(),
    };
    Box::into_raw(Box::new(hc_cql_batch_t { b: Batch::new(t), values: Vec::new() }))
}

#[no_mangle]
pub extern "C" fn hc_cql_batch_free(b: *mut hc_cql_batch_t) {
    if !b.is_null() {
        drop(unsafe { Box::from_raw(b) });
    }
}

/// Appends a copy of the statement (its prepared statement and values; its own options are
/// ignored: the batch's apply).
#[no_mangle]
pub extern "C" fn hc_cql_batch_add(b: *mut hc_cql_batch_t, st: *const hc_cql_stmt_t) -> c_int {
    if b.is_null() || st.is_null() {
        return HC_CQL_INVALID;
    }
    let (b, st) = unsafe { (&mut *b, &*st) };
    if b.values.len() >= usize::from(u16::MAX) {
        return HC_CQL_INVALID;
    }
    b.b.append_statement(st.p.clone());
    b.values.push(st.values.clone());
    HC_CQL_OK
}

#[no_mangle]
pub extern "C" fn hc_cql_batch_set_consistency(b: *mut hc_cql_batch_t, c: c_int) -> c_int {
    let Some(c) = consistency_of(c) else { return HC_CQL_INVALID };
    if b.is_null() {
        return HC_CQL_INVALID;
    }
    unsafe { &mut *b }.b.set_consistency(c);
    HC_CQL_OK
}

#[no_mangle]
pub extern "C" fn hc_cql_batch_set_serial_consistency(b: *mut hc_cql_batch_t, c: c_int) -> c_int {
    let Some(c) = serial_of(c) else { return HC_CQL_INVALID };
    if b.is_null() {
        return HC_CQL_INVALID;
    }
    unsafe { &mut *b }.b.set_serial_consistency(Some(c));
    HC_CQL_OK
}

#[no_mangle]
pub extern "C" fn hc_cql_batch_set_timestamp(b: *mut hc_cql_batch_t, us: i64) {
    if !b.is_null() {
        unsafe { &mut *b }.b.set_timestamp(if us == i64::MIN { None } else { Some(us) });
    }
}

#[no_mangle]
pub extern "C" fn hc_cql_batch_set_timeout_ms(b: *mut hc_cql_batch_t, ms: u32) {
    if !b.is_null() {
        let t = if ms == 0 { None } else { Some(Duration::from_millis(u64::from(ms))) };
        unsafe { &mut *b }.b.set_request_timeout(t);
    }
}

/// Executes the batch; a conditional batch's answer (`[applied]` first, then the current
/// values when not applied) comes back in rows_out.
#[no_mangle]
pub extern "C" fn hc_cql_batch_execute(
    s: *mut hc_cql_session_t,
    b: *const hc_cql_batch_t,
    rows_out: *mut *mut hc_cql_rows_t,
    err: *mut hc_cql_error_t,
) -> c_int {
    guard(err, || {
        if !rows_out.is_null() {
            unsafe { *rows_out = ptr::null_mut() };
        }
        let Some((se, rt)) = parts(s) else {
            return set_err(err, HC_CQL_INVALID, 0, 0, "hc_cql_batch_execute: NULL session");
        };
        if b.is_null() {
            return set_err(err, HC_CQL_INVALID, 0, 0, "hc_cql_batch_execute: NULL batch");
        }
        let b = unsafe { &*b };
        match rt.block_on(se.batch(&b.b, &b.values)) {
            Ok(r) => give_rows(rows_out, r, err),
            Err(e) => report_exec(err, &e),
        }
    })
}
