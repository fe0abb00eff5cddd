"""100-LongBench's judge prompts, ``utils/metrics.py`` of uservan/100-LongBench byte for byte.

The official strings are ``str.format`` templates; here their ``{{`` / ``}}`` are already single
braces, and only the named placeholders are filled
(:func:`raylc.scoring.judge.judge_sample_prompts`). The fluency prompt keeps the official
file's mojibake ("\u00c3\ufffd") in its incoherent example.
"""

from __future__ import annotations

__all__ = ["QA_JUDGE", "SUM_FLUENCY", "SUM_PRECISION"]

#: ``judge_prompt`` (``qa_model_score``): ``{question}``, ``{correct_answers}`` (one answer), ``{parsed_output}``
QA_JUDGE = (
    "Please act as an impartial judge and evaluate the quality of the provided answer which "
    "attempts to answer the provided question based on a provided context.\n"
    "Although you are not given the context, you will be given a set of correct answers that "
    "achieves full scores on all metrics, and you need to assess the provided answers using the "
    "correct answers.\n"
    "\n"
    "Below is your grading rubric:\n"
    "\n"
    "Fluency:\n"
    "- Score 0 (incoherent): Incoherent sentences\n"
    "- Score 1 (coherent, but repetitive answer): Coherent, fluent, grammatically correct but "
    "repetitive answers.\n"
    "- Score 2 (coherent, non-repetitive answer): Coherent, non-repetitive, fluent, grammatically "
    "correct answers.\n"
    "\n"
    "Correctness:\n"
    "- Score 0 (Incorrect): The answer does not agree with the provided correct answers at all.\n"
    "- Score 1 (partly correct): Partly agree with one of the provided correct answers (for "
    "example, the question asks for a date and a person; the answer gets the date right but the "
    "person wrong).\n"
    "- Score 2 (correct but not fully relevant): Fully agrees with one of the provided correct "
    "answers but mentions other completely irrelevant information. Note that extra details provided "
    "in the answer, even if not mentioned in the correct answers, should NOT be seen as irrelevant "
    "as long as they are relevant to the question to a reasonable extend.\n"
    "- Score 3 (correct and relevant): Fully agrees with one of the provided correct answers and "
    "only provides information relevant to the question. Note that if the answer is longer than the "
    "correct answer, as long as everything in the answer is relevant to the question, it should "
    'still be given score 3. For example, if the correct answer is "the North Pole" and the answer '
    'is "They are headed for the North Pole", it should still be given a score of 3.\n'
    "\n"
    "Now, read the following question, answer, and correct answers. First think step-by-step and "
    "provide your reasoning and assessment on the answer. Then output your score in the following "
    'json format: {"fluency": 0, "correctness": 1}.\n'
    "\n"
    "Question: {question}\n"
    "Correct answers: {correct_answers}\n"
    "Answer: {parsed_output}\n"
)

#: ``fluency_prompt`` (``sum_model_score``): ``{text}``, the stripped summary
SUM_FLUENCY = (
    "Please act as an impartial judge and evaluate the fluency of the provided text. The text "
    "should be coherent, non-repetitive, fluent, and grammatically correct.\n"
    "\n"
    "Below is your grading rubric:\n"
    "- Score 0 (incoherent, repetitive, or incomplete): Incoherent sentences, repetitive sentences "
    "(even if not by exact words), incomplete answers, or gibberish. Note that even if the answer "
    "is coherent, if it is repetitive or incomplete, it should be given a score of 0.\n"
    "  - Examples:\n"
    '    - Incomplete: "Summary:"\n'
    '    - Incoherent: "Summary: The plaintiff the the the the able the the the the the the the the '
    "the the able the the the the the Ã�\n"
    '"\n'
    '    - Repetitive: "Summary: The U.S. government brought a criminal case against four '
    "defendants. Summary: The U.S. government brought a criminal case against four defendants. "
    "Summary: The U.S. government brought a criminal case against four defendants. Summary: The "
    'U.S. government brought a criminal case against four defendants."\n'
    "\n"
    "- Score 1 (coherent, non-repetitive answer): Coherent, non-repetitive, fluent, grammatically "
    "correct answers. If the text is coherent, non-repetitive, and fluent, but the last sentence is "
    "truncated, it should still be given a score of 1.\n"
    "  - Examples:\n"
    '    - "This case is about an apprenticeship test that had a disparate impact on Black '
    "apprenticeship applicants. The Equal Employment Opportunity Commission (EEOC) filed this "
    'lawsuit on December 27, 2004, in U.S. District Court for the Southern District of Ohio."\n'
    '    - "The plaintiffs sought declaratory and injunctive relief, as well as attorneys\' fees and '
    "costs, under the Americans with Disabilities Act, the Rehabilitation Act of 1973, the Social "
    "Security Act, and the Nursing Home Reform Act. The case was certified as a class action on "
    "behalf of all Medicaid-eligible adults with disabilities in Cook County, Illinois, who are "
    "being, or may in the future be, unnecessarily confined to nursing facilities and with "
    "appropriate supports and services may be able to live in a community setting. The defendants "
    "denied the allegations and argued that the plaintiffs' claims were not typical of the class "
    "and that the class definition was too broad. The case is ongoing, with discovery and expert "
    'testimony scheduled for the fall of"\n'
    "\n"
    "Now, read the provided text, and evaluate the fluency using the rubric. Then output your score "
    'in the following json format: {"fluency": 1}.\n'
    "\n"
    'Text: "{text}"\n'
)

#: ``precision_prompt`` (``sum_model_score``): ``{expert_summary}`` (one answer), ``{summary}`` (stripped)
SUM_PRECISION = (
    "Please act as an impartial judge and evaluate the quality of the provided summary of a civil "
    "lawsuit. The summary is based on a set of legal documents, and it should contain a short "
    "description of the background, the parties involved, and the outcomes of the case.\n"
    "\n"
    "Below is your grading rubric:\n"
    "Precision:\n"
    "- Evaluate the provided summary by deciding if each sentence in the provided summary is "
    "supported by the information provided in the expert summary. A sentence is considered "
    "supported if its major facts align with the information in the expert summary. A sentence is "
    "still considered supported even if some of its minor details, such as dates, entity names, or "
    "the names of laws and previous court cases, are not explicitly mentioned in the expert "
    "summary. A sentence is not supported if its major facts are not mentioned or contradicted in "
    "the expert summary.\n"
    "- Score: the number of sentences in the provided summary that are supported by the expert "
    "summary.\n"
    "- Examples: use the following examples to guide your evaluation.\n"
    "\n"
    "Example 1:\n"
    "\n"
    'Expert summary: "This lawsuit, brought in the the U.S. District Court for the Central District '
    "of California, was filed on June 3, 2020. The plaintiffs were represented by attorneys from "
    "the ACLU of Southern California. This lawsuit followed nation-wide protests that occurred in "
    "response to the killing of George Floyd by a police officer in Minneapolis. While most "
    "protests were peaceful, some ended in violence, property destruction, rioting, and looting. "
    "Many cities, including Los Angeles and San Bernardino, issued curfews in an attempt to quell "
    "these riots. This action challenged these curfews as violations of free speech and assembly, "
    "free movement, due process, and challenged the San Bernardino curfew as a violation of the "
    "establishment clause (the San Bernardino curfew included a provision that exempted attendants "
    "of religious meetings from the curfew.) The plaintiffs sought injunctive and declaratory "
    "relief that would void the curfew and prohibit the cities from enforcing them. The following "
    "day, June 4th, 2020, the case was assigned to District Judge Philip S. Gutierre and to "
    "Magistrate Judge Pedro V. Castillo. Judge Gutierrez informed the parties that he was part of a "
    "mandatory alternative dispute resolution (ADR) program and asked the parties to try to form an "
    "agreement before going to trial. On July 7, 2020, the plaintiffs voluntarily dismissed the "
    "complaint, citing that fact that the city had rescinded the curfews already and not attempted "
    'to reinstate them. The case is now closed."\n'
    "\n"
    'Provided summary: "In June 2020, Black Lives Matter - Los Angeles and several individuals '
    "filed a lawsuit in the U.S. District Court for the Central District of California against Los "
    "Angeles Mayor Eric Garcetti, other city officials, and the City of San Bernardino, challenging "
    "the constitutionality of curfew orders imposed during protests against police violence. The "
    "plaintiffs, represented by the ACLU of Southern California, argued that the curfews violated "
    "their First Amendment rights to free speech and assembly, as well as their freedom of "
    "movement, by suppressing political protests and other activities. The lawsuit also claimed "
    "that the curfews were not narrowly tailored to address any emergency and lacked sufficient "
    "notice. However, the plaintiffs voluntarily dismissed the case in July 2020 after the "
    'defendants lifted the curfew orders and did not reinstate them in the following weeks."\n'
    "\n"
    "Reasoning: The first sentence in the provided summary is well supported by the expert summary "
    "even though some entity names are not explicitly mentioned. The second sentence is also well "
    "supported by the expert summary, as it mentions the ACLU of Southern California and the First "
    "Amendment rights. The third sentence is not supported by the expert summary, as it does not "
    "mention the lack of narrow tailoring or sufficient notice. The fourth sentence is well "
    "supported by the expert summary, as it mentions the voluntary dismissal of the case in July "
    "2020. Therefore, the precision score is 3.\n"
    "\n"
    'Output: {"precision": 3, "sentence_count": 4}\n'
    "\n"
    "\n"
    "Example 2:\n"
    "\n"
    'Expert summary: "On August 22, 2007, individuals with disabilities filed a lawsuit under the '
    "Americans with Disabilities Act (ADA), the Social Security Act, the Rehabilitation Act, and "
    "the Nursing Care Reform Act, against various Illinois state officials in the United States "
    "District Court for the Northern District of Illinois.  Plaintiffs, represented by private and "
    "public interest counsel, asked the court for declaratory and injunctive relief, claiming that "
    "they were institutionalized in a nursing facility even though they were capable of living in a "
    "more community-integrated setting with appropriate services.  Plaintiffs claimed that "
    "Defendants conditioned receipt of long-term care on remaining in an institutionalized setting, "
    "even though it would be less expensive for Plaintiffs to receive appropriate care in the "
    'community. The Court (Judge Joan H. Lefkow) certified a class as: "all Medicaid-eligible '
    "adults with disabilities in Cook County, Illinois, who are being, or may in the future be, "
    "unnecessarily confined to nursing facilities and who, with appropriate supports and services, "
    'may be able to live in a community setting."  71 Fed.R.Serv.3d 1089. At a status hearing on '
    "January 7, 2011, the parties advised Magistrate Judge Maria Valdez that they could conclude "
    "settlement discussions without further assistance from the court. On Aug. 29, 2011, the "
    "parties jointly moved for the court to approve the consent decree they had agreed upon.  The "
    "court held a fairness hearing on Dec. 20, 2011, and ultimately accepted the decree. The "
    "consent decree established benchmarks for moving specific numbers of class members out of "
    "nursing facilities and into community-based settings. Over the course of the first "
    "two-and-a-half years, the decree compelled the state to move 1,100 class members into the "
    "community. It also required the state to provide up to $10 million in housing assistance to "
    "support the first group of transitioned adults. The decree also compelled the state to develop "
    "services needed to adequately support class members who choose to live in the community. It "
    "established a monitor to ensure compliance with the decree, and granted $1.2 million in "
    "attorneys' fees. The court approved an updated plan following the parties' cross-motion to "
    "enter into a cost-neutral plan and supplement and amend the December 2011 consent decree on "
    "November 16, 2016. The plan included the transition of class members into community-based "
    "settings, and continued evaluations and service plans for the class members. The court "
    "retained jurisdiction to oversee the full implementation of the plan. The court approved an "
    "updated plan on April 5, 2018. Monitoring by the court appointed monitor (Gail P. Hutchings) "
    'is ongoing as of May 20, 2020."\n'
    "\n"
    'Provided: "Summary: Five Medicaid-eligible individuals with disabilities, Lenil Colbert, '
    "Constance Gray, Ernest Reeves, Kenya Lyles, and Dwight Scott, filed a class action lawsuit in "
    "the United States District Court for the Northern District of Illinois against Illinois state "
    "officials, including Governor Rod R. Blagojevich, Secretary of the Illinois Department of "
    "Human Services Carol L. Adams, Director of the Illinois Department of Healthcare and Family "
    "Services Barry S. Maram, and Director of the Illinois Department of Public Health Eric E. "
    "Whitaker. The plaintiffs alleged that the defendants' policies and practices effectively "
    "compel people with disabilities to enter nursing facilities in order to receive long-term care "
    "and assistance, forcing them to forego liberty, privacy, independence, and the opportunity to "
    "live in the communities of their choice. The plaintiffs sought declaratory and injunctive "
    "relief, as well as attorneys' fees and costs, under the Americans with Disabilities Act, the "
    "Rehabilitation Act of 1973, the Social Security Act, and the Nursing Home Reform Act. The case "
    "was certified as a class action on behalf of all Medicaid-eligible adults with disabilities in "
    "Cook County, Illinois, who are being, or may in the future be, unnecessarily confined to "
    "nursing facilities and with appropriate supports and services may be able to live in a "
    "community setting. The defendants denied the allegations and argued that the plaintiffs' "
    "claims were not typical of the class and that the class definition was too broad. The case is "
    'ongoing, with discovery and expert testimony scheduled for the fall of"\n'
    "\n"
    'Reasoning: The first sentence is supported as the expert summary states that "individuals with '
    'disabilities filed a lawsuit... against various Illinois state officials", even though some '
    "minor details (the name of the people) are not mentioned. The second sentence is not supported "
    "as the expert summary does not discuss how the plaintiffs alleged that the defendants' "
    "policies forced them to forego their rights. The third sentence is mostly supported as the "
    "expert summary mentions that the plaintiffs sought declaratory and injunctive relief, but it "
    "does not mention the attorneys' fees and costs, which are minor details. The fourth sentence "
    "is supported as the expert summary mentions the class action certification by the court. The "
    "fifth sentence is not supported as the expert summary does not mention the defendants' denial "
    "of the allegations. The sixth sentence is not supported as the expert summary states that the "
    "case was settled through the consent decree, while the provided summary states that the case "
    "is ongoing. Therefore, the precision score is 3.\n"
    "\n"
    'Output: {"precision": 2, "sentence_count": 6}\n'
    "\n"
    "Now, read the provided summary and expert summary, and evaluate the summary using the rubric. "
    "First, think step-by-step and provide your reasoning and assessment on the answer. Then output "
    'your score in the following json format: {"precision": 2, "sentence_count": 6}.\n'
    "\n"
    'Expert summary: "{expert_summary}"\n'
    "\n"
    'Provided summary: "{summary}"\n'
)
