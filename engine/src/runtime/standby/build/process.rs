//! Process isolation's side of building an incarnation: its chain's
//! operators run in a child process started here, the chain's end (the
//! rings to the consumers) stays on the worker (see `standby/remote.rs`).

use super::*;

/// An incarnation's chain under process isolation: its operators run in a
/// child process started now (so that a warm standby's is running when
/// it takes over); the driver keeps the chain's end (see
/// `standby/remote.rs`). A child that cannot be started fails the attempt.
pub(super) fn remote_chain_build(
    w: &Arc<Wiring>,
    group: &Arc<crate::runtime::standby::group::Group>,
    inc: u64,
    primary: bool,
    sc: &crate::standby::StandbyConfig,
    ctx: &Rc<TaskCtx>,
) -> (
    crate::runtime::standby::entry::ChainBuild,
    Option<Rc<std::cell::RefCell<crate::runtime::standby::remote::Link>>>,
) {
    use crate::runtime::standby::remote;
    let (node, inst) = (group.node, group.instance);
    let link = match spawn_incarnation(w, group, inc, primary, sc) {
        Ok(l) => Rc::new(std::cell::RefCell::new(l)),
        Err(e) => {
            let name = group.name.to_string();
            ctx.shared.fail(JobError::Io {
                operator: name.clone(),
                instance: inst,
                context: "starting the process of a standby incarnation".into(),
                path: None,
                source: e,
            });
            return (
                Box::new(move |_| {
                    panic!("{name}[{inst}]: its incarnation's process could not be started")
                }),
                None,
            );
        }
    };
    let (w2, c2) = (Arc::clone(w), Rc::clone(ctx));
    let last = *group.chain.last().expect("a chain has a head");
    let watched = Rc::clone(&link);
    let build = Box::new(move |state| {
        let mut tb = TaskBuild::default();
        // The chain's end stays here: the rings to the consumers.
        let tail = build_out(&w2, last, inst, &c2, &mut tb);
        let tail = crate::runtime::standby::kit::of_stream(&w2.graph.nodes[last])
            .and_then(|k| k.remote_tail(&w2.graph.codecs, tail))
            .expect("engine bug: validated process isolation without a codec");
        let r = c2.long(|| link.borrow_mut().build(state, tail, &c2));
        if let Err(e) = r {
            remote::fail(e);
        }
        let probe = w2
            .config
            .probes
            .as_ref()
            .and_then(|p| p.probe(&w2.graph.nodes[node].name, inst));
        let skit = crate::runtime::standby::kit::of_node(&w2.graph.nodes[node])
            .expect("engine bug: a standby group without its kit");
        skit.remote_chain(Rc::clone(&link), &c2, probe, node)
    });
    (build, Some(watched))
}

/// Starts the child of incarnation `inc` of `group`: the pipes, the
/// process, its status file.
fn spawn_incarnation(
    w: &Arc<Wiring>,
    group: &Arc<crate::runtime::standby::group::Group>,
    inc: u64,
    primary: bool,
    sc: &crate::standby::StandbyConfig,
) -> std::io::Result<crate::runtime::standby::remote::Link> {
    use crate::runtime::standby::remote::{self, child};
    let sb = w
        .shared
        .standby
        .as_ref()
        .expect("engine bug: an incarnation without its standby run");
    let dir = sb.dir.path();
    let base = format!("{}-{}-inc{inc}", group.name, group.instance);
    let req = dir.join(format!("{base}.req"));
    let tx = crate::standby::pipe::PipeWriter::create(&req, remote::PIPE_BYTES)?;
    let rx = crate::standby::pipe::PipeReader::create(
        &child::Role::reply_path(&req),
        remote::PIPE_BYTES,
    )?;
    let role = child::Role {
        node: group.node,
        instance: group.instance,
        inc,
        attempt: w.shared.attempt,
        origin_ns: w.shared.origin.monotonic_ns(),
        job: child::job_hash(&w.graph),
        members: group.chain.clone(),
        pins: w.graph.pinned.clone(),
        pipes: req.clone(),
    };
    let mut cmd = std::process::Command::new("/proc/self/exe");
    {
        use std::os::unix::process::CommandExt;
        let mut args = std::env::args_os();
        if let Some(a0) = args.next() {
            cmd.arg0(a0);
        }
        match &sc.child_args {
            Some(a) => cmd.args(a),
            None => cmd.args(args),
        };
    }
    if !sb.child_cores.is_empty() {
        let k = sb
            .next_child_core
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        cmd.env(
            child::CORE,
            sb.child_cores[k % sb.child_cores.len()].to_string(),
        );
    }
    cmd.env(child::ROLE, role.env())
        .env(child::PIPES, &req)
        .env(child::PARENT, std::process::id().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    let c = crate::sys::process::Child::spawn_arming_itself(cmd)?;
    let role_name = if primary { "primary" } else { "standby" };
    Ok(remote::Link::new(
        tx,
        rx,
        c,
        remote::ChildRecord {
            operator: group.name.to_string(),
            instance: group.instance,
            incarnation: inc,
            pid: 0,
            role: role_name,
            exit: None,
        },
        Arc::clone(&sb.children),
        dir.join(format!("{base}.status")),
    ))
}
