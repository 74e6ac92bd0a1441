"""The game master of the social network: it owns the feed and resolves actions into it.

State (plain data, so it digests and checkpoints): the posts, who wrote and
liked each one, who follows whom, and per-agent inboxes of posts that mention
them or reply to them. Actions (from :mod:`agents`):

* ``post``: a new post; ``@name`` mentions of real agents are recorded;
* ``reply``: a post that answers another (``target``);
* ``like``: a like of another agent's post (liking twice is a no-op);
* ``follow``: follow the author of post ``target`` (or ``@name`` in the text);
* ``idle``: nothing.

Scenarios (``model.KNOBS``) change it through :meth:`SocialWorld.change`: a
post injected by an agent or by the ``system`` account (which every agent
follows), the size of the feeds, and interviews of agents, which change
nothing here.

Every resolved action becomes events: :meth:`SocialWorld.decide` works out
what happens without changing anything, :meth:`SocialWorld.apply` changes the
state from the event alone, so replaying ``action_events.jsonl`` into a fresh
world rebuilds it.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simulacra import InvalidAction
from simulacra.agents import ActionEvent, AgentId, World
from simulacra.societies import Interview

__all__ = ["SYSTEM", "SocialAction", "SocialObservation", "SocialWorld"]

_MENTION = re.compile(r"@(\w(?:[\w.-]*\w)?)")
#: ``@handle: text`` at the start of an injected post: posted as that agent.
_AUTHOR = re.compile(r"^@(\w(?:[\w.-]*\w)?):\s*(.*)$", re.DOTALL)
#: The account of posts a scenario injects without an author; every agent follows it.
SYSTEM = "system"


@dataclass(frozen=True, slots=True)
class SocialAction:
    """One agent's choice: ``kind`` is post, reply, like, follow or idle."""

    kind: str
    text: str = ""
    target: int | None = None


@dataclass(frozen=True, slots=True)
class SocialObservation:
    """What one agent sees: who it is, whom it may mention, its feed and its mentions."""

    handle: str
    agents: tuple[str, ...]
    feed: tuple[tuple[int, str, str, int | None], ...]
    mentions: tuple[int, ...]


class SocialWorld(World):
    """A Twitter/Mastodon-style feed of posts, replies, likes and follows.

    Args:
        handles: Every agent's handle (its id).
        follows: ``{handle: [handles it follows]}`` at the start.
        feed_size: Posts in each agent's feed.
        local: A neighbourhood network: each agent's neighbours are those it
            follows at the start and those who follow it, and it sees, mentions,
            answers, likes and follows only them (and the system account's posts);
            its feed has no "newest posts of all". The world then says so
            (:meth:`affected_by`), and the event-driven engine starts turns early
            while turns far away are still in flight. A post's id then depends
            on its author and how many posts the author wrote before, not on
            the posts far away (``n * (agents + 1) + the author's place``), so
            the engine may also commit turns out of order (``out_of_order``). Its
            inboxes are then in the order of the posts' times, not of arrival, so
            turns of different agents commute (:meth:`commutes`) and a turn goes
            into the engine's forward world as soon as its call returns.
    """

    def __init__(self, handles: Sequence[str], follows: Mapping[str, Sequence[str]],
                 feed_size: int = 8, local: bool = False) -> None:
        super().__init__()
        self.handles = sorted(handles)
        self.feed_size = feed_size
        #: Posts by id: [author, text, reply_to, step, mentions, likes, chain], and on a
        #: street the time it was posted (its inboxes' order).
        self.posts: list[list[Any]] = []
        self.follows: dict[str, list[str]] = {h: sorted(follows.get(h, ())) for h in self.handles}
        self.by_author: dict[str, list[int]] = {h: [] for h in self.handles}
        #: Posts that mention an agent or reply to one of its posts.
        self.inbox: dict[str, list[int]] = {h: [] for h in self.handles}
        #: Posts an agent has replied to.
        self.answered: dict[str, list[int]] = {h: [] for h in self.handles}
        self.counts: dict[str, int] = {"post": 0, "reply": 0, "like": 0, "follow": 0,
                                       "idle": 0, "mention": 0, "turn_failed": 0}
        #: Per agent: [likes received, replies received, mentions received].
        self.received: dict[str, list[int]] = {h: [0, 0, 0] for h in self.handles}
        self._known = frozenset(self.handles)
        self._local = local
        #: Each agent's neighbours (local networks only): it follows them or they follow it.
        self._near: dict[str, frozenset[str]] = {}
        if local:
            near: dict[str, set[str]] = {h: set(self.follows[h]) for h in self.handles}
            for handle, followed in self.follows.items():
                for other in followed:
                    near[other].add(handle)
            self._near = {h: frozenset(others - {h}) for h, others in near.items()}
        #: Local networks: the author's place in the ids, and each post's place in posts.
        self._rank = {h: i for i, h in enumerate([*self.handles, SYSTEM])}
        self._at: dict[int, int] = {}

    _NOT_STATE = World._NOT_STATE | {"_known", "_local", "_near", "_rank", "_at"}
    #: The state is plain JSON (str keys only): the digest skips the canonical walk.
    PLAIN_STATE = True

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a state from :meth:`get_state` (and where each post id is)."""
        super().set_state(state)
        self._at = {}
        if self._local:
            written: dict[str, int] = {}
            for at, post in enumerate(self.posts):
                n = written.get(post[0], 0)
                written[post[0]] = n + 1
                self._at[self._local_id(post[0], n)] = at

    def _post(self, post_id: int) -> list[Any]:
        """The post of id *post_id*."""
        return self.posts[self._at[post_id] if self._local else post_id]

    def _next_id(self, author: str) -> int:
        """The id of *author*'s next post."""
        if self._local:
            return self._local_id(author, len(self.by_author.get(author, ())))
        return len(self.posts)

    def _local_id(self, author: str, n: int) -> int:
        """On a street, the id of *author*'s post number *n* (from 0)."""
        return n * len(self._rank) + self._rank[author]

    # -- observing ---------------------------------------------------------------

    def observation_for(self, agent_id: AgentId, snapshot: Any = None) -> SocialObservation:
        """The agent's feed: recent posts of those it follows, its mentions, the newest posts.

        *snapshot* is the number of posts at the start of the batch: later
        posts are not seen (the engine resolves none while observations are
        built, so this only matters for callers that interleave).
        """
        return self._observe(str(agent_id), snapshot, None)

    def observation_at(self, agent_id: AgentId, time: float) -> SocialObservation:
        """On a street: what the agent sees at *time*, counting others' posts before it only.

        Each post there holds its time, and inboxes and authors' posts are in
        time order, so the posts of *time* or later are left out from the end.
        """
        if not self._local:
            raise NotImplementedError("only a street's posts hold their times")
        return self._observe(str(agent_id), None, time)

    def _observe(self, me: str, snapshot: Any, before: float | None) -> SocialObservation:
        """observation_for, or (*before*, a street only) observation_at."""
        posts = self.posts
        limit = len(posts) if snapshot is None or self._local else int(snapshot)
        by_author = self.by_author
        follows = self.follows[me]
        if before is not None:
            inbox = self._before(self.inbox[me], before, 3)
            picked = set(inbox)
            for other in follows:
                picked.update(self._before(by_author[other], before, 2))
            picked.update(self._before(by_author.get(SYSTEM, []), before, 2))
        elif limit >= len(posts):  # every post is seen (the engines' case): nothing to filter
            inbox = self.inbox[me][-3:]
            picked = set(inbox)
            for other in follows:
                picked.update(by_author[other][-2:])
            # Posts of the system account (a scenario's): everyone follows it.
            system = by_author.get(SYSTEM)
            if system:
                picked.update(system[-2:])
        else:
            inbox = [i for i in self.inbox[me] if i < limit][-3:]
            picked = set(inbox)
            for other in follows:
                picked.update(i for i in by_author[other][-2:] if i < limit)
            picked.update(i for i in by_author.get(SYSTEM, ())[-2:] if i < limit)
        if not self._local:  # the newest posts of all: everyone's
            picked.update(range(max(0, limit - 3), limit))
        done = self.answered[me]
        mentions = [i for i in inbox if i not in done]
        shown = sorted(picked)[-self.feed_size:]
        post = self._post
        feed = tuple([(i, *post(i)[:3]) for i in shown])  # (id, author, text, reply_to)
        authors = {line[1] for line in feed}
        authors.update(follows)
        authors.discard(me)
        authors.discard(SYSTEM)
        # Whom it may mention: not itself, and not the system account (no agent).
        agents = tuple(sorted(authors)[:8])
        if mentions:
            ids = set(shown)
            mentions = [m for m in mentions if m in ids]
        return SocialObservation(me, agents, feed, tuple(mentions))

    def _before(self, ids: list[int], before: float, last: int) -> list[int]:
        """The *last* of *ids* (posts in time order) posted before *before*."""
        end = len(ids)
        while end and self._order(ids[end - 1])[0] >= before:
            end -= 1
        return ids[max(0, end - last):end]

    def affected_by(self, agent_id: AgentId) -> frozenset[str] | None:
        """A local network's neighbours of *agent_id*: all it can see or be woken by."""
        return self._near[str(agent_id)] if self._local else None

    def snapshot(self) -> int:
        """The number of posts now."""
        return len(self.posts)

    # -- resolving -----------------------------------------------------------------

    def _mentions(self, author: str, text: str, *, reach: bool = True) -> list[str]:
        """The agents ``@named`` in *text*; on a street, only *author*'s neighbours (*reach*)."""
        known = (self._near.get(author, self._known) if self._local and reach
                 else self._known)
        seen: list[str] = []
        for name in _MENTION.findall(text):
            if name in known and name != author and name not in seen:
                seen.append(name)
        return seen

    def _far(self, who: str, other: str) -> bool:
        """Whether *other* is out of *who*'s reach (a local network's non-neighbour)."""
        return self._local and other not in (who, SYSTEM) and other not in self._near[who]

    def _target(self, action: SocialAction, who: str) -> list[Any]:
        target = action.target
        if target is None or not (target in self._at if self._local
                                  else 0 <= target < len(self.posts)):
            raise InvalidAction(f"{action.kind} by @{who}: no post #{target}")
        return self._post(target)

    def decide(self, agent_id: AgentId, action: Any, step: int,
               time: float) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
        """The events of *action*; raises InvalidAction for one the feed cannot take."""
        who = str(agent_id)
        if not isinstance(action, SocialAction):
            raise InvalidAction(f"@{who} returned {type(action).__name__}, not a SocialAction")
        kind = action.kind
        if kind in ("post", "reply"):
            text = " ".join(action.text.split())[:280]
            if not text:
                raise InvalidAction(f"{kind} by @{who} has no text")
            mentions = self._mentions(who, text)
            data: dict[str, Any] = {"post": self._next_id(who), "text": text,
                                    "mentions": mentions}
            triggers = list(mentions)
            if kind == "reply":
                parent = self._target(action, who)
                if self._far(who, parent[0]):
                    return [("idle", {"reason": f"#{action.target} is not a neighbour's"}, ())]
                data["reply_to"] = action.target
                if parent[0] != who and parent[0] not in triggers:
                    triggers.append(parent[0])
            return [(kind, data, tuple(triggers))]
        if kind == "like":
            post = self._target(action, who)
            if self._far(who, post[0]):
                return [("idle", {"reason": f"#{action.target} is not a neighbour's"}, ())]
            if post[0] == who or who in post[5]:
                return [("idle", {"reason": f"cannot like #{action.target} again"}, ())]
            return [("like", {"post": action.target, "author": post[0]}, ())]
        if kind == "follow":
            names = self._mentions(who, action.text, reach=False)
            whom = names[0] if names else self._target(action, who)[0]
            if self._far(who, whom) or whom == SYSTEM:
                return [("idle", {"reason": f"@{whom} is not a neighbour"}, ())]
            if whom == who or whom in self.follows[who]:
                return [("idle", {"reason": f"already follows @{whom}"}, ())]
            return [("follow", {"whom": whom}, ())]
        if kind == "idle":
            return [("idle", {}, ())]
        raise InvalidAction(f"@{who} chose the unknown action {kind!r}")

    # -- scenarios (model.KNOBS) ------------------------------------------------------

    def knob_values(self) -> dict[str, Any]:
        """The knobs that hold a value, as they are now."""
        return {"feed_size": self.feed_size}

    def change(self, knob: str, value: Any, *, step: int,
               time: float) -> list[tuple[str, str, dict[str, Any], tuple[str, ...]] | Interview]:
        """What a scenario's change of *knob* makes happen; changes nothing (like decide)."""
        if knob == "feed_size":
            return [("scenario", "knob", {"knob": knob, "from": self.feed_size, "to": value}, ())]
        if knob == "post":
            author, text = SYSTEM, " ".join(str(value).split())
            match = _AUTHOR.match(text)
            if match is not None:
                author, text = match.group(1), match.group(2)
                if author not in self._known:
                    raise InvalidAction(f"no agent @{author} to post as (handles look like "
                                        f"{self.handles[0]})")
            if not text:
                raise InvalidAction("the post has no text")
            text = text[:280]
            mentions = self._mentions(author, text)
            return [(author, "post", {"post": self._next_id(author), "text": text,
                                      "mentions": mentions, "injected": True},
                     tuple(mentions))]
        if knob == "interview":
            who, sep, question = str(value).partition(":")
            question = " ".join(question.split())
            if not sep or not question:
                raise InvalidAction("an interview is 'handle,handle: question' (or '*: question' "
                                    f"for every agent), got {value!r}")
            names = [n.strip().lstrip("@") for n in who.split(",") if n.strip()]
            if names == ["*"]:
                names = list(self.handles)
            unknown = [n for n in names if n not in self._known]
            if unknown or not names:
                raise InvalidAction(f"no agent @{unknown[0] if unknown else ''} to interview "
                                    f"(handles look like {self.handles[0]})")
            return [Interview(tuple(dict.fromkeys(names)), question)]
        raise InvalidAction(f"the social world has no knob {knob!r}")

    def apply(self, event: ActionEvent) -> None:
        """Change the feed as *event* says."""
        super().apply(event)
        kind, data, who = event.kind, event.data, event.agent
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if kind in ("post", "reply"):
            post_id: int = data["post"]
            reply_to = data.get("reply_to")
            mentions: list[str] = data["mentions"]
            chain = 1 if mentions else 0
            if reply_to is not None:
                parent = self._post(reply_to)
                if who in parent[4]:  # answering a mention: the chain grows
                    chain = parent[6] + 1
                    self.answered[who].append(reply_to)
            record = [who, data["text"], reply_to, event.step, mentions, [], chain]
            if self._local:
                self._at[post_id] = len(self.posts)
                record.append(event.time)  # the inboxes' order: see _deliver
            self.posts.append(record)
            if reply_to is not None:
                parent = self._post(reply_to)
                if parent[0] != who and parent[0] in self.inbox:
                    self._deliver(parent[0], post_id)
                    self.received[parent[0]][1] += 1
            self.by_author.setdefault(who, []).append(post_id)  # the system account too
            for name in mentions:
                if reply_to is None or self._post(reply_to)[0] != name:
                    self._deliver(name, post_id)
                self.received[name][2] += 1
            self.counts["mention"] += len(mentions)
        elif kind == "like":
            self._post(data["post"])[5].append(who)
            if data["author"] in self.received:
                self.received[data["author"]][0] += 1
        elif kind == "follow":
            follows = self.follows[who]
            follows.append(data["whom"])
            follows.sort()
        elif kind == "knob" and data.get("knob") == "feed_size":
            self.feed_size = int(data["to"])

    def _deliver(self, name: str, post_id: int) -> None:
        """Put post *post_id* in *name*'s inbox.

        On a street the inbox is in the order of the posts' times, then ids, not
        of arrival: the same whatever order the turns of different agents went
        in (:meth:`commutes`). The kernel resolves in time order, so a post goes
        at the end there; only at one instant, or in a forward world that took a
        turn ahead of another, does it go before some.
        """
        box = self.inbox[name]
        if not self._local or not box or self._order(box[-1]) <= self._order(post_id):
            box.append(post_id)
        else:
            bisect.insort(box, post_id, key=self._order)

    def _order(self, post_id: int) -> tuple[float, int]:
        """A street inbox's key: the post's time (a state from before times were kept: none)."""
        post = self._post(post_id)
        return (post[7] if len(post) > 7 else -math.inf), post_id

    def commutes(self) -> bool:
        """On a street, turns of different agents commute: ids per author, inboxes by time."""
        return self._local

    # -- reporting -----------------------------------------------------------------

    def engagement(self, handle: str) -> int:
        """Replies received x2 + likes received + mentions received."""
        likes, replies, mentions = self.received[handle]
        return 2 * replies + likes + mentions

    def probe(self, step: int) -> dict[str, Any]:
        """Per-step telemetry: the size of the feed."""
        return {"posts": len(self.posts), "likes": self.counts["like"],
                "mentions": self.counts["mention"]}

    def samples(self, limit: int = 3) -> list[list[str]]:
        """The longest mention threads (up to *limit*), each as ``@author: text`` lines."""
        ends = sorted(range(len(self.posts)), key=lambda i: (-self.posts[i][6], i))
        at = self._at if self._local else None
        threads: list[list[str]] = []
        used: set[int] = set()
        for end in ends:
            if len(threads) >= limit or self.posts[end][6] < 2:
                break
            chain: list[int] = []  # places in posts
            post: int | None = end
            while post is not None and len(chain) < 6:
                chain.append(post)
                parent = self.posts[post][2]  # an id
                post = None if parent is None else parent if at is None else at[parent]
            if used.intersection(chain):
                continue  # a part of a thread already shown
            used.update(chain)
            threads.append([f"@{self.posts[i][0]}: {self.posts[i][1]}" for i in reversed(chain)])
        return threads

    def summary(self) -> dict[str, Any]:
        """Posts, replies, likes, follows, mentions, mention chains, the most engaged agents."""
        chains = [post[6] for post in self.posts]
        top = sorted(self.handles, key=lambda h: (-self.engagement(h), h))[:5]
        return {
            "agents": len(self.handles),
            "posts": self.counts["post"],
            "replies": self.counts["reply"],
            "likes": self.counts["like"],
            "follows": self.counts["follow"],
            "mentions": self.counts["mention"],
            "mention chains": sum(1 for c in chains if c >= 2),
            "longest mention chain": max(chains, default=0),
            "idle turns": self.counts["idle"],
            "failed turns": self.counts["turn_failed"],
            # Only agents someone engaged with; none at all says so.
            "most engaged": ", ".join(f"@{h} ({self.engagement(h)})" for h in top
                                      if self.engagement(h) > 0) or "nobody engaged",
        }
