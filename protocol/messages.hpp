// SPDX-License-Identifier: Apache-2.0
// messages.hpp - every message of the protocol, listed once. For each,
// EXITPOLICY_MESSAGES(X) calls X(type, number, name, Message): the frame
// type (Type::type in codec.hpp, `number` in a frame's header), the name
// errors and logs give it (type_name), and its struct in wire.hpp, whose
// encode() and decode() wire.cpp makes from its field list. A number is
// never reused: a peer of another build reads it as the same message.
#pragma once

// clang-format off
#define EXITPOLICY_MESSAGES(X)                                                                                   \
    /* Authentication and outcomes, on every link to srun's front end (FE). */                                    \
    X(challenge, 1, "challenge", Challenge)   /* server -> client: a nonce, first frame on a connection */          \
    X(hello, 2, "hello", Hello)               /* client -> server: who I am, proof that I hold the secret */        \
    X(welcome, 3, "welcome", Welcome)         /* server -> client: proof that the server holds it too */            \
    X(outcome, 4, "outcome", Outcome)         /* client -> server: one task's end */                                \
    X(ack, 5, "ack", Ack)                     /* server -> client: that outcome is recorded */                      \
    /* The overlay between the node daemons and the FE (pmix_server/). */                                         \
    X(enroll, 6, "enroll", Enroll)            /* daemon -> FE: my listen address */                                 \
    X(step_map, 7, "step map", StepMap)       /* FE -> daemon: every node, every rank's node, the tree */           \
    X(event, 8, "event", Event)               /* anyone -> everyone: a task ended abnormally */                     \
    X(fence_up, 9, "fence up", FenceUp)       /* toward the FE: a subtree's fence contribution */                   \
    X(fence_down, 10, "fence down", FenceDown) /* from the FE: a fence's result */                                  \
    X(dmodex_req, 11, "dmodex request", DmodexReq) /* routed to the node owning a rank */                           \
    X(dmodex_resp, 12, "dmodex response", DmodexResp)                                                             \
    X(abort, 13, "abort", Abort)              /* daemon -> FE: a task called PMIx_Abort */                          \
    X(terminate, 14, "terminate", Terminate)  /* FE -> every daemon: kill the local tasks */                        \
    X(notice, 15, "notice", Notice)           /* daemon -> FE: a line for srun's stderr */                          \
    /* The node daemon's local socket (no HMAC: the kernel tells who is asking). */                               \
    X(env_request, 16, "environment request", EnvRequest) /* a task, before exec: my rank and pid */                \
    X(env_reply, 17, "environment reply", EnvReply)       /* the daemon: the PMIx environment for that rank */      \
    X(stop, 18, "stop", Stop)                 /* slurmstepd at step end: flush and exit */                          \
    /* Publish / lookup / unpublish, kept at the FE. */                                                           \
    X(data_request, 19, "data request", DataRequest) /* daemon -> FE */                                             \
    X(data_reply, 20, "data reply", DataReply)       /* FE -> the requesting daemon */                              \
    X(relay, 21, "relay", Relay)              /* an event a task raised, for the clients of every node */           \
    /* Run-through (the tree loses a daemon). */                                                                  \
    X(gone, 22, "gone", Gone)                 /* toward the FE: a node's daemon left the tree (its link closed) */  \
    X(node_down, 23, "node down", NodeDown)   /* FE -> every daemon: a node is lost with its tasks */               \
    /* Outcomes in bulk: what a node daemon passes up in one loop turn (its own */                                \
    /* tasks' and its children's), acknowledged in one frame per hop. */                                          \
    X(outcomes, 24, "outcomes", Outcomes)                                                                         \
    X(acks, 25, "acks", Acks)                                                                                     \
    /* FE -> every daemon: every task of the step has ended. Until then a daemon */                               \
    /* whose own tasks are done stays (within its drain limit): a task elsewhere */                               \
    /* may still ask for what its tasks committed. */                                                             \
    X(step_done, 26, "step done", StepDone)                                                                       \
    /* slurmstepd -> its node daemon, on their control link: a task it has just */                                \
    /* forked, when the tasks' PMIx environment was planned without the daemon */                                 \
    /* (planned_environment.hpp) and no task asks the daemon for it. */                                           \
    X(task_started, 27, "task started", TaskStarted)                                                              \
    /* slurmstepd -> FE, on its own link: this node's daemon waits unstarted */                                   \
    /* until a task connects to its PMIx socket, or the FE connects to the port */                                \
    /* named here (the node's address, as the FE sees this link): the FE does */                                  \
    /* once another node's daemon enrolls, as a step's fences and data span */                                    \
    /* every node. */                                                                                             \
    X(standby, 28, "standby", Standby)
// clang-format on
